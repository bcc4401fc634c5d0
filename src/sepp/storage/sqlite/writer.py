"""Entry point of the SQLite writer process: ``python -m sepp.storage.sqlite.writer``.

``ProcessCommitter`` starts it; see ``sepp.storage.sqlite.writer_process``. A module of its
own (not imported by the package) so that ``-m`` runs it without importing it twice.
"""

from __future__ import annotations

from sepp.storage.sqlite.writer_process import child_main

if __name__ == "__main__":
    child_main()
