"""``devmem exporter``: devmem's per-process figures, reservations and doctor's findings as Prometheus metrics.

:mod:`devmem.exporter.readings` reads a node once per scrape (each device under a deadline, in a thread of its
own), the reservation ledger is read as admission reads it (``devmem.engine.reservations``, without writing),
:mod:`devmem.exporter.metrics` turns a reading into metric families (a ``prometheus_client`` collector) and
:mod:`devmem.exporter.server` serves them over HTTP. Only the server and the collector need ``prometheus-client``
(``pip install prometheus-client``, or the ``exporter`` extra); nothing here is imported by ``import devmem``.
"""
