"""The ``devmem`` command: its commands (:mod:`.main`), doctor's findings (:mod:`.doctor`), the process table
(:mod:`.processes`), reservations for people (:mod:`.reservations`), text fitted to a terminal (:mod:`.format`) and
the one output writer (:mod:`.output`). ``import devmem`` never imports it."""
