"""The checks of what a vendor library answers, at the path backends know (their home is the core's private
:mod:`devmem._readings`, which the minimal-backend adapter uses too)."""

from devmem._readings import FIGURE_LIMIT as FIGURE_LIMIT
from devmem._readings import PID_LIMIT as PID_LIMIT
from devmem._readings import PROCESS_BYTES_LIMIT as PROCESS_BYTES_LIMIT
from devmem._readings import process_bytes as process_bytes
from devmem._readings import process_id as process_id
from devmem._readings import process_list as process_list
from devmem._readings import vendor_text as vendor_text
from devmem._readings import whole_bytes as whole_bytes
from devmem.platform import checked_memory as checked_memory

__all__ = [
    "FIGURE_LIMIT",
    "PID_LIMIT",
    "PROCESS_BYTES_LIMIT",
    "checked_memory",
    "process_bytes",
    "process_id",
    "process_list",
    "vendor_text",
    "whole_bytes",
]
