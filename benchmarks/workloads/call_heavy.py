"""A call-heavy program of the everyday kind, for the function tracer's benchmark (``bench_functions.py``): JSON in
and out, dataclasses, and a small class hierarchy whose methods call each other (many short Python calls, as an
application's domain code makes). ``run(scale)`` does the work and returns a checksum; run as a script it prints how
long its work took (wall time and process CPU time)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any


@dataclasses.dataclass
class Item:
    sku: str
    price: float
    quantity: int

    def total(self) -> float:
        return self.price * self.quantity


@dataclasses.dataclass
class Order:
    number: int
    customer: str
    items: list[Item]

    def total(self) -> float:
        return sum(item.total() for item in self.items)


class Rule:
    """A pricing rule: applies to an order or not, and then changes its total."""

    def applies(self, order: Order) -> bool:
        return True

    def apply(self, order: Order, total: float) -> float:
        return total

    def price(self, order: Order, total: float) -> float:
        return self.apply(order, total) if self.applies(order) else total


class Discount(Rule):
    def __init__(self, share: float) -> None:
        self.share = share

    def apply(self, order: Order, total: float) -> float:
        return total * (1 - self.share)


class BulkDiscount(Discount):
    def applies(self, order: Order) -> bool:
        return len(order.items) > 3


class Loyalty(Discount):
    def applies(self, order: Order) -> bool:
        return order.customer.endswith("7")


class Shipping(Rule):
    def apply(self, order: Order, total: float) -> float:
        return total + self.fee(total)

    def fee(self, total: float) -> float:
        return 0.0 if total > 100 else 4.5


RULES: list[Rule] = [BulkDiscount(0.1), Loyalty(0.05), Shipping()]


def make_order(number: int) -> Order:
    items = [Item(f"sku{(number * 7 + i) % 50}", 1.5 + (number + i) % 20, 1 + i % 3) for i in range(number % 6 + 1)]
    return Order(number, f"user{number % 100}", items)


def price(order: Order) -> float:
    total = order.total()
    for rule in RULES:
        total = rule.price(order, total)
    return round(total, 2)


def encode(order: Order) -> str:
    return json.dumps(dataclasses.asdict(order), sort_keys=True)


def decode(text: str) -> Order:
    data: dict[str, Any] = json.loads(text)
    return Order(data["number"], data["customer"], [Item(**item) for item in data["items"]])


def run(scale: int = 6000) -> float:
    """The work: ``scale`` orders made, encoded, decoded and priced, some several times."""
    checksum = 0.0
    for number in range(scale):
        order = decode(encode(make_order(number)))
        for _ in range(3):
            checksum += price(order)
    return checksum


def main() -> int:
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    start, cpu_start = time.perf_counter(), time.process_time()
    checksum = run(scale)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    # (process CPU: a tracer's background threads' work during the loop counts too)
    print(f"call_heavy: {scale} orders in {elapsed:.3f} s, process CPU {cpu:.3f} s (checksum {checksum:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
