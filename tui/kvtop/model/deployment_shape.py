"""The deployment's shape: how many nodes, which node this log is from, its PD role, and which
ranks this node should log (SGLang's own placement rule), against the ranks it did log.

SGLang (engine.py `_calculate_rank_ranges` 0.5.10+, the same inline code in 0.4.6–0.5.8 and in
the DP controller): `pp_per_node = max(pp // nnodes, 1)`, `nnodes_per_pp = max(nnodes // pp, 1)`,
`tp_per_node = tp // nnodes_per_pp`; node r runs PP ranks `[pp_per_node·(r // nnodes_per_pp),
+pp_per_node)` × TP ranks `[tp_per_node·(r % nnodes_per_pp), +tp_per_node)`, once per DP replica
without DP attention (TP restarts at 0 in each replica), once in all with DP attention (the DP
groups split the TP ranks). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.sglang.server_args import ServerArgs
from kvtop.sglang.start_state import Startup

__all__ = ["DeploymentShape", "deployment_shape"]


@dataclass(frozen=True, slots=True)
class DeploymentShape:
    nnodes: int | None  # from server_args; None when not logged
    node_rank: int | None
    disaggregation_mode: str | None  # "null", "prefill", "decode"; None when not logged
    dp_attention: bool | None
    tp_size: int | None
    pp_size: int | None
    dp_size: int | None
    ranks_expected: int | None  # the ranks THIS node runs (None: the sizes are not known)
    ranks_in_log: int  # distinct rank tags this log shows
    tp_range: tuple[int, int] | None  # this node's TP ranks [start, stop)
    pp_range: tuple[int, int] | None  # this node's PP ranks [start, stop)
    out_of_world: tuple[str, ...]  # logged tags past the world size ("TP9" with tp 8)
    other_node_ranks: tuple[str, ...]  # logged ranks that SGLang places on another node

    @property
    def multi_node(self) -> bool:
        return self.nnodes is not None and self.nnodes > 1

    @property
    def disaggregated(self) -> bool:
        return self.disaggregation_mode in ("prefill", "decode")

    def to_json(self) -> dict[str, object]:
        """JSON `deployment`: exactly these keys, a contract with scripts that read it."""
        return {
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "disaggregation_mode": self.disaggregation_mode,
            "ranks_expected": self.ranks_expected,
            "ranks_in_log": self.ranks_in_log,
        }

    def words(self) -> str | None:
        """ "prefill node 0 of 2 · ranks TP0–7 of TP16 (the others log on node 1)"; None for a
        single node that is not a PD server (nothing new to say)."""
        role = f"{self.disaggregation_mode} " if self.disaggregated else ""
        if not self.multi_node:
            return f"{role}server" if role else None
        node = "node ?" if self.node_rank is None else f"node {self.node_rank}"
        head = f"{role}{node} of {self.nnodes}"
        ranks = self._ranks_words()
        return f"{head} · {ranks}" if ranks else head

    def _ranks_words(self) -> str | None:
        if self.tp_range is None or self.tp_size is None:
            return None
        tp = self._own_span()
        world = f"TP{self.tp_size}"
        if self.pp_size is not None and self.pp_size > 1:
            world = f"PP{self.pp_size}×TP{self.tp_size}"
        others = [n for n in range(self.nnodes or 0) if n != self.node_rank]
        where = _nodes_words(others)
        return f"ranks {tp} of {world} (the others log on {where})" if where else None

    def flags(self) -> list[str]:
        """Sentences for what does not fit the shape: tags past the world size, ranks that
        SGLang places on another node."""
        found = []
        if self.out_of_world:
            tags = ", ".join(self.out_of_world)
            found.append(
                f"rank tag{'s' if len(self.out_of_world) > 1 else ''} {tags} in the log "
                f"{'are' if len(self.out_of_world) > 1 else 'is'} outside the world size "
                f"({self._world_words()}): the log mixes servers, or server_args is not this "
                "server's (check --unit / --log-file)."
            )
        if self.other_node_ranks:
            mine = f" runs {self._own_span()}" if self._own_span() else ""
            found.append(
                f"{_list(self.other_node_ranks)} in the log {'is' if len(self.other_node_ranks) == 1 else 'are'} "
                f"not this node's: by SGLang's placement node {self.node_rank} of {self.nnodes}"
                f"{mine}, so they run on another node and have no GPU here (the log holds "
                "another node's output, or server_args is another node's)."
            )
        return found

    def _own_span(self) -> str | None:
        if self.tp_range is None:
            return None
        tp = _span("TP", self.tp_range)
        if self.pp_size is not None and self.pp_size > 1 and self.pp_range is not None:
            return f"{_span('PP', self.pp_range)} {tp}"
        return tp

    def _world_words(self) -> str:
        sizes = [("TP", self.tp_size), ("PP", self.pp_size), ("DP", self.dp_size)]
        return " ".join(f"{name}{value}" for name, value in sizes if value is not None)


def _span(name: str, bounds: tuple[int, int]) -> str:
    start, stop = bounds
    return f"{name}{start}" if stop - start == 1 else f"{name}{start}–{stop - 1}"


def _nodes_words(nodes: list[int]) -> str | None:
    if not nodes:
        return None
    if len(nodes) == 1:
        return f"node {nodes[0]}"
    if nodes == list(range(nodes[0], nodes[-1] + 1)):
        return f"nodes {nodes[0]}–{nodes[-1]}"
    return "nodes " + ", ".join(map(str, nodes))


def _list(ranks: tuple[str, ...]) -> str:
    return ", ".join(ranks) if len(ranks) <= 4 else f"{ranks[0]} … {ranks[-1]} ({len(ranks)} ranks)"


def _node_ranges(
    tp: int, pp: int, nnodes: int, node_rank: int
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """This node's (TP range, PP range) by SGLang's rule; None when the sizes do not divide."""
    pp_per_node = max(pp // nnodes, 1)
    nnodes_per_pp = max(nnodes // pp, 1)
    if tp % nnodes_per_pp:
        return None
    tp_per_node = tp // nnodes_per_pp
    pp_start = pp_per_node * (node_rank // nnodes_per_pp)
    tp_start = tp_per_node * (node_rank % nnodes_per_pp)
    if pp_start >= pp or tp_start >= tp:
        return None
    return (tp_start, tp_start + tp_per_node), (pp_start, min(pp, pp_start + pp_per_node))


def _logged_ranks(startup: Startup) -> dict[str, tuple[int | None, int | None, int | None]]:
    """Every rank the log shows (startup lines and batch lines): its (tp, pp, dp) tags."""
    found = {name: (r.tags.tp, r.tags.pp, r.tags.dp) for name, r in startup.ranks.items()}
    for name in startup.latest_batch:
        found.setdefault(name, _tags_of(name))
    return found


def _tags_of(name: str) -> tuple[int | None, int | None, int | None]:
    values: dict[str, int] = {}
    for word in name.split():
        for tag in ("ATTN_CP", "MOE_DP", "DP", "PP", "TP", "EP"):
            if word.startswith(tag) and word[len(tag) :].isdigit():
                values.setdefault(tag, int(word[len(tag) :]))
                break
    return values.get("TP"), values.get("PP"), values.get("DP")


def _out_of_world(
    logged: dict[str, tuple[int | None, int | None, int | None]], args: ServerArgs | None
) -> tuple[str, ...]:
    if args is None:
        return ()
    limits = (("TP", args.tp_size), ("PP", args.pp_size), ("DP", args.dp_size))
    bad: set[str] = set()
    for tags in logged.values():
        for (name, size), value in zip(limits, tags, strict=True):
            if size is not None and value is not None and value >= size:
                bad.add(f"{name}{value}")
    return tuple(sorted(bad, key=lambda t: (t[:2], int(t[2:]))))


def _per_node(args: ServerArgs, tp_range: tuple[int, int], pp_range: tuple[int, int]) -> int:
    replicas = 1 if args.enable_dp_attention or not args.dp_size else args.dp_size
    return replicas * (tp_range[1] - tp_range[0]) * (pp_range[1] - pp_range[0])


def _elsewhere(
    logged: dict[str, tuple[int | None, int | None, int | None]],
    tp_range: tuple[int, int],
    pp_range: tuple[int, int],
) -> tuple[str, ...]:
    """Logged ranks (inside the world) that SGLang runs on another node."""
    names = []
    for name, (tp, pp, _dp) in logged.items():
        tp_away = tp is not None and not tp_range[0] <= tp < tp_range[1]
        pp_away = pp is not None and not pp_range[0] <= pp < pp_range[1]
        if tp_away or pp_away:
            names.append(name)
    return tuple(sorted(names, key=_order))


def _order(name: str) -> tuple[int, int, int]:
    tp, pp, dp = (-1 if v is None else v for v in _tags_of(name))
    return dp, pp, tp  # an absent tag sorts first


def _sizes(args: ServerArgs) -> tuple[int | None, int, int, int]:
    """(tp, pp, nnodes, node_rank), the missing ones as SGLang's defaults (pp 1, one node)."""
    return args.tp_size, args.pp_size or 1, args.nnodes or 1, args.node_rank or 0


def deployment_shape(startup: Startup) -> DeploymentShape:
    """The shape from server_args (log or /server_info) and the rank tags the log shows."""
    args = startup.server_args
    logged = _logged_ranks(startup)
    if args is None:
        return DeploymentShape(
            *(None,) * 7, ranks_expected=None, ranks_in_log=len(logged), tp_range=None,
            pp_range=None, out_of_world=(), other_node_ranks=(),
        )  # fmt: skip
    tp, pp, nnodes, node_rank = _sizes(args)
    ranges = _node_ranges(tp, pp, nnodes, node_rank) if tp is not None else None
    out = _out_of_world(logged, args)
    elsewhere: tuple[str, ...] = ()
    if ranges is not None and nnodes > 1:
        bad = set(out)
        elsewhere = tuple(n for n in _elsewhere(logged, *ranges) if not set(n.split()) & bad)
    return DeploymentShape(
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        disaggregation_mode=args.disaggregation_mode,
        dp_attention=args.enable_dp_attention,
        tp_size=tp,
        pp_size=pp,
        dp_size=args.dp_size,
        ranks_expected=_per_node(args, *ranges) if ranges else None,
        ranks_in_log=len(logged),
        tp_range=ranges[0] if ranges else None,
        pp_range=ranges[1] if ranges else None,
        out_of_world=out,
        other_node_ranks=elsewhere,
    )


def rank_span(ranks: list[str]) -> str:
    """ "TP0–7" for a run of TP ranks, else the ranks listed."""
    numbers = [int(r[2:]) for r in ranks if r.startswith("TP") and r[2:].isdigit()]
    run = len(numbers) == len(ranks) > 2
    if run and sorted(numbers) == list(range(min(numbers), max(numbers) + 1)):
        return f"TP{min(numbers)}–{max(numbers)}"
    return ", ".join(ranks)
