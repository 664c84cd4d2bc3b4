"""Incidents: rules the collector evaluates on what it stores; a rule that fires keeps the window around its event,
of every process in its scope, as one self-contained incident that outlives the ring (``docs/incidents.md``).

- ``rules.py``: what a rule is (conditions, scope, window, limits); ``rule_file.py`` reads them from TOML and flags;
- ``frame_match.py`` (C twin ``_match.c``) and ``watch.py``: stored EVENTS frames checked against the rules, off the
  event loop, each match a ``Firing`` (``firing.py``);
- ``capture.py``: a firing's window pinned and collected, then written whole; ``incident_files.py``: saved incidents
  on disk, their retention, listing and reading; ``incident_objects.py`` the same in JetStream's object store
  (``--jetstream``: shared by the fleet's collectors); ``incident_store.py`` what the two have in common;
- ``engine.py``: the loop that ties them together for the service (``left_pending.py``: an incident a killed collector
  left pending, written when its window ends); ``webhook.py``, ``tellings.py``: a rule's URL told of each one.
"""
