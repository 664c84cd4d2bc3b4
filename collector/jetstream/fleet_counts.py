"""The fleet's counts from the stream's message headers alone (``/stats``): per process, what the newest message of
each of its records on each collector says (``envelope.py``), what its messages hold (``Ringtrace-Events``,
``Ringtrace-Event-Bytes``) and what its notes say was purged. No payload is read: the servers send headers only."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ringtrace.collector.jetstream.envelope import EVENT_BYTES, EVENTS, PROCESS, Envelope, read_cleared
from ringtrace.collector.jetstream.fleet import StoredMessage
from ringtrace.collector.jetstream.subjects import process_of_subject
from ringtrace.collector.store.accounts import Counts

__all__ = ["ProcessTotals", "fleet_totals"]


@dataclass
class ProcessTotals:
    """One process's counts in the stream, its tracks summed."""

    host: str
    pid: int
    instance: str
    name: str = ""
    counts: Counts = field(default_factory=Counts)
    #: Its newest message's stream sequence (whose name it shows).
    newest_seq: int = 0


def fleet_totals(messages: Iterable[StoredMessage]) -> list[ProcessTotals]:
    """Per process with a segment in ``messages`` (headers only are enough), its counts; oldest first."""
    processes: dict[str, ProcessTotals] = {}
    newest: dict[tuple[str, int, str], Envelope] = {}
    notes: dict[str, tuple[int, dict[int, tuple[int, int]]]] = {}
    for message in messages:
        cleared = read_cleared(message.headers)
        if cleared is not None:
            if message.subject not in notes or notes[message.subject][0] < message.stream_seq:
                notes[message.subject] = (message.stream_seq, cleared)
            continue
        envelope = Envelope.read(message.headers)
        who = process_of_subject(message.subject)
        if envelope is None or who is None or message.headers is None:
            continue
        process = processes.get(message.subject)
        if process is None:
            process = processes[message.subject] = ProcessTotals(*who)
        headers = message.headers
        try:
            process.counts.received_events += int(headers.get(EVENTS, "0"))  # (held: counted stored below)
            process.counts.received_bytes += int(headers.get(EVENT_BYTES, "0"))
        except ValueError:
            pass
        if message.stream_seq > process.newest_seq:
            process.newest_seq, process.name = message.stream_seq, headers.get(PROCESS, "")
        key = (envelope.collector, envelope.record, message.subject)
        if key not in newest or newest[key].seq < envelope.seq:
            newest[key] = envelope
    sent: dict[str, Counts] = {}
    for (_, _, subject), envelope in newest.items():
        total = sent.setdefault(subject, Counts())
        for counts in envelope.counts.values():
            total.add(counts)
    for subject, process in processes.items():
        held_events, held_bytes = process.counts.received_events, process.counts.received_bytes
        total = sent.get(subject, Counts())
        for events, nbytes in notes.get(subject, (0, {}))[1].values():
            total.cleared_events += events
            total.cleared_bytes += nbytes
        lost = total.capped_events + total.discarded_events + total.cleared_events
        lost_bytes = total.capped_bytes + total.discarded_bytes + total.cleared_bytes
        # Handed to the stream and not there any more: its limits removed it (received never less than is held).
        total.received_events = max(total.received_events, held_events + lost)
        total.received_bytes = max(total.received_bytes, held_bytes + lost_bytes)
        total.overwritten_events = total.received_events - lost - held_events
        total.overwritten_bytes = total.received_bytes - lost_bytes - held_bytes
        process.counts = total
    return list(processes.values())
