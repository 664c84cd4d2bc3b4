"""Recording with no code change: ``ringtrace run`` (the ``ringtrace`` command's entry point, ``command.py``) and the
fleet switch (``RINGTRACE_AUTO=1``, ``fleet_switch.py``), which start recording the same way (``recording_start.py``)
with the settings of one option table (``launch_options.py``).
"""

from __future__ import annotations

from ringtrace.client.launch.launch_options import LaunchSettings, settings_from
from ringtrace.client.launch.recording_start import start_recording

__all__ = ["LaunchSettings", "settings_from", "start_recording"]
