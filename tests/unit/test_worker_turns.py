"""Conversion workers are handed out in the order files were submitted (isolate._Turns)."""
from __future__ import annotations

import threading
import time

from appliance.ingest.isolate import _Turns


def test_workers_go_to_tickets_in_drawing_order_whoever_asks_first() -> None:
    turns = _Turns()
    tickets = [turns.draw() for _ in range(5)]
    served: list[int] = []

    def take(ticket: int) -> None:
        worker = turns.take(ticket)
        served.append(ticket)
        turns.put(worker)  # type: ignore[arg-type]  # back for the next ticket

    threads = [threading.Thread(target=take, args=(t,)) for t in reversed(tickets)]
    for t in threads:
        t.start()
        time.sleep(0.02)  # the last ticket asks first
    assert served == []  # no worker is idle yet: every taker waits
    turns.put(object())  # type: ignore[arg-type]
    for t in threads:
        t.join(5)
    assert served == tickets


def test_a_dropped_ticket_does_not_hold_up_the_later_ones() -> None:
    turns = _Turns()
    first, second, third = (turns.draw() for _ in range(3))
    turns.put(object())  # type: ignore[arg-type]
    turns.drop(second)
    assert turns.take(first) is not None
    turns.put(object())  # type: ignore[arg-type]
    assert turns.take(third) is not None  # the refused file's turn was skipped


def test_closing_wakes_every_waiting_taker() -> None:
    turns = _Turns()
    tickets = [turns.draw() for _ in range(3)]
    got: list[object] = []
    threads = [threading.Thread(target=lambda t=t: got.append(turns.take(t))) for t in tickets]
    for t in threads:
        t.start()
    time.sleep(0.05)
    turns.close()
    for t in threads:
        t.join(5)
    assert got == [None, None, None]
