"""A byte budget cut (``limit_to``) lowers the ids of the table it cut, not of every table after it."""

from __future__ import annotations

from ringtrace.wire.model import StringTable


def test_ids_a_byte_cut_took_come_back_when_the_table_starts_again() -> None:
    table = StringTable()
    for i in range(10_000):  # recorded before the first connection: 2.5 MB of long labels
        table["x" * 240 + str(i)]
    table.limit_to(100_000, 2 * 1024 * 1024)  # the WELCOME: the default limits
    assert table.overflow_id < 10_000  # this table keeps what fits its bytes
    table.recycles = True
    table.recycle()
    for i in range(20_000):
        table[f"short-{i}"]
    assert len(table.strings) == 20_000 and table.overflowed == 0


def test_a_lower_id_limit_holds_in_every_epoch() -> None:
    table = StringTable()
    table.limit_to(10)
    table.recycles = True
    table.recycle()
    for i in range(20):
        table[f"label-{i}"]
    assert len(table.strings) == 9 and table.overflow_id == 9
