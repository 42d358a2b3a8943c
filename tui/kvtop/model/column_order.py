"""How a table's rows can be sorted, and the cycle of orders `o` steps through: one class for
the overview's GPU rows (tui/kvtop/model/memory/gpu_order.py) and the process table
(tui/kvtop/model/processes/table.py), each naming its own columns."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class ColumnOrder:
    """One way to sort the rows: the column it sorts by and which end comes first."""

    key: str  # the column's key, in the table's own words
    descending: bool  # True: the largest value first

    @property
    def arrow(self) -> str:
        return "▼" if self.descending else "▲"


class OrderCycle:
    """The orders `o` cycles through; the first is the default, and a key no order has is
    read as the first."""

    def __init__(self, *orders: ColumnOrder) -> None:
        self.orders = orders
        self.keys = tuple(o.key for o in orders)
        self.default = orders[0].key

    def named(self, key: str) -> ColumnOrder:
        return next((o for o in self.orders if o.key == key), self.orders[0])

    def after(self, key: str) -> str:
        """The order after `key` in the cycle (the first after the last one)."""
        position = self.keys.index(key) if key in self.keys else -1
        return self.keys[(position + 1) % len(self.keys)]


def sorted_by_number(
    rows: Iterable[Row],
    order: ColumnOrder,
    number: Callable[[Row], float | None],
    tie: Callable[[Row], SupportsRichComparison],
) -> tuple[Row, ...]:
    """ROWS by their number in ORDER's direction; rows without one (unreadable, no figure)
    last; every tie, and the rows without a number, by `tie`, so the order never flickers
    between refreshes."""
    sign = -1.0 if order.descending else 1.0

    def by_number(row: Row) -> tuple[int, float, SupportsRichComparison]:
        value = number(row)
        if value is None:
            return (1, 0.0, tie(row))
        return (0, sign * value, tie(row))

    return tuple(sorted(rows, key=by_number))
