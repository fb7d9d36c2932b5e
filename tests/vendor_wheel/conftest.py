"""In devmem's own test run, ACME's tests are collected only where devmem-acme is installed.

tests/testing/test_vendor_wheel.py builds the wheel, installs it in a throwaway environment and runs them there.
"""

from importlib import metadata

try:
    metadata.distribution("devmem-acme")
    collect_ignore: list[str] = []
except metadata.PackageNotFoundError:
    collect_ignore = ["tests"]
