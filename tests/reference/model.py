#!/usr/bin/env python3
"""An independent reference model of tollgate's arithmetic (docs/design.md §3).

Written from the contract alone, not from the Rust core, so that the two
implementations check each other: same policies, same trace, same decisions.
Python integers are unbounded, so nothing here saturates or overflows; the
Rust core must reach the same answers within its fixed-width integers.

Two modes:

  model.py --config policies.yaml < events.jsonl > expected.jsonl
      Decide a trace, like `tollgate replay`.

  model.py --seed S --out DIR [--events N]
      Generate random policies and a random trace from seed S and write
      DIR/policies.yaml, DIR/events.jsonl and DIR/expected.jsonl in the
      shared vectors' exact format.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from dataclasses import dataclass

UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
ALGORITHMS = ("token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log")
EXACT_LIMIT = 1 << 53
MAX_REFILL_MS = 1 << 52
MAX_LOG_LIMIT = 10_000


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def parse_duration(text: str) -> int:
    digits = ""
    for i, ch in enumerate(text):
        if not ch.isascii() or not ch.isdigit():
            digits, unit = text[:i], text[i:]
            break
    else:
        raise ValueError(f"{text!r} is not a duration")
    if not digits or unit not in UNITS or int(digits) == 0:
        raise ValueError(f"{text!r} is not a duration")
    return int(digits) * UNITS[unit]


# ---------------------------------------------------------------------------
# Decisions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int | None
    reset_after_ms: int

    def line(self) -> str:
        return json.dumps(
            {
                "allowed": self.allowed,
                "limit": self.limit,
                "remaining": self.remaining,
                "retry_after_ms": self.retry_after_ms,
                "reset_after_ms": self.reset_after_ms,
            }
        )


# ---------------------------------------------------------------------------
# The five algorithms. Each `decide(state, now, cost)` returns
# (decision, new_state, full_at): `full_at` is the instant from which the
# stored state is back to full (buckets) or empty (windows) and a store may
# forget it; None when there is no state at all.
# ---------------------------------------------------------------------------


class TokenBucket:
    def __init__(self, capacity: int, tokens: int, per_ms: int):
        g = math.gcd(tokens, per_ms)
        self.c, self.n, self.p = capacity, tokens // g, per_ms // g
        self.cap_units = self.c * self.p

    def decide(self, state, now, cost):
        c, n, p, cap = self.c, self.n, self.p, self.cap_units
        units, last = state if state is not None else (cap, now)
        now = max(now, last)
        avail = min(cap, units + (now - last) * n)
        allowed = cost * p <= avail
        units2 = avail - cost * p if allowed else avail
        if allowed:
            retry = 0
        elif cost > c:
            retry = None
        else:
            retry = ceil_div(cost * p - avail, n)
        reset = ceil_div(cap - units2, n)
        d = Decision(allowed, c, units2 // p, retry, reset)
        return d, (units2, now), now + reset


class Gcra:
    def __init__(self, capacity: int, tokens: int, per_ms: int):
        g = math.gcd(tokens, per_ms)
        self.c, self.n, self.p = capacity, tokens // g, per_ms // g
        self.cap_units = self.c * self.p

    def decide(self, state, now, cost):
        c, n, p, cap = self.c, self.n, self.p, self.cap_units
        tat = state if state is not None else n * now
        debt = max(0, tat - n * now)
        allowed = debt + cost * p <= cap
        if allowed and cost > 0:
            new_state = n * now + debt + cost * p
        else:
            new_state = state  # a peek or a rejection writes nothing
        debt2 = debt + cost * p if allowed else debt
        if allowed:
            retry = 0
        elif cost > c:
            retry = None
        else:
            retry = ceil_div(debt + cost * p - cap, n)
        d = Decision(allowed, c, (cap - debt2) // p, retry, ceil_div(debt2, n))
        full_at = None if new_state is None else ceil_div(new_state, n)
        return d, new_state, full_at


class FixedWindow:
    def __init__(self, limit: int, window_ms: int):
        self.l, self.w = limit, window_ms

    def decide(self, state, now, cost):
        l, w = self.l, self.w
        if state is not None:
            k0, count, last = state
            now = max(now, last)
        k = now // w
        count = state[1] if state is not None and state[0] == k else 0
        allowed = count + cost <= l
        count2 = count + cost if allowed else count
        reset = (k + 1) * w - now
        retry = 0 if allowed else (None if cost > l else reset)
        d = Decision(allowed, l, l - count2, retry, reset)
        return d, (k, count2, now), (k + 1) * w if count2 > 0 else now


class SlidingWindow:
    def __init__(self, limit: int, window_ms: int):
        self.l, self.w = limit, window_ms

    def roll(self, state, now):
        """(prev, curr) as seen at `now` (now >= the state's last_seen)."""
        if state is None:
            return 0, 0
        k0, prev, curr, _ = state
        k = now // self.w
        if k == k0:
            return prev, curr
        if k == k0 + 1:
            return curr, 0
        return 0, 0

    def admits(self, prev, curr, now, cost):
        w = self.w
        e = now - (now // w) * w
        return prev * (w - e) + (curr + cost) * w <= self.l * w

    def decide(self, state, now, cost):
        l, w = self.l, self.w
        if state is not None:
            now = max(now, state[3])
        k = now // w
        e = now - k * w
        prev, curr = self.roll(state, now)
        allowed = self.admits(prev, curr, now, cost)
        curr2 = curr + cost if allowed else curr
        remaining = max(0, (l * w - prev * (w - e) - curr2 * w) // w)
        if curr2 > 0:
            reset = (k + 2) * w - now
        elif prev > 0:
            reset = (k + 1) * w - now
        else:
            reset = 0
        if allowed:
            retry = 0
        elif cost > l:
            retry = None
        else:
            retry = self.retry(prev, curr, k, e, cost)
        d = Decision(allowed, l, remaining, retry, reset)
        return d, (k, prev, curr2, now), now + reset

    def retry(self, prev, curr, k, e, cost):
        """The smallest wait d > 0 after which `cost` is admitted."""
        l, w = self.l, self.w
        # Later in this window, as the previous window's weight fades.
        if prev > 0 and curr + cost <= l:
            d = w - e - ((l - curr - cost) * w) // prev
            if 1 <= d < w - e:
                return d
        # In the next window, where this window's count is the previous one.
        room = (l - cost) * w
        offset = 0 if curr == 0 else max(0, w - room // curr)
        if offset < w:
            return w - e + offset
        # The window after: both counts have aged out.
        return 2 * w - e


# A sliding log's bound (docs/design.md §3): exact below LOG_EXACT entries,
# beyond that logged at the end of its bucket of ceil(W / LOG_EXACT) ms.
LOG_EXACT = 64
LOG_MAX = 2 * LOG_EXACT + 1


class SlidingLog:
    def __init__(self, limit: int, window_ms: int):
        self.l, self.w = limit, window_ms

    def decide(self, state, now, cost):
        l, w = self.l, self.w
        q = ceil_div(w, LOG_EXACT)
        entries: list = []
        if state is not None:
            old, last = state
            now = max(now, last)
            entries = [(t, c) for (t, c) in old if now < t + w]
        if len(entries) >= LOG_MAX:
            # Every entry to its bucket's end, equal times merged.
            merged: list = []
            for t, c in entries:
                end = ceil_div(t, q) * q
                if merged and merged[-1][0] == end:
                    merged[-1] = (end, merged[-1][1] + c)
                else:
                    merged.append((end, c))
            entries = merged
        counted = sum(c for _, c in entries)
        allowed = counted + cost <= l
        if allowed and cost > 0:
            at = now if len(entries) < LOG_EXACT else ceil_div(now, q) * q
            if entries and entries[-1][0] > at:
                at = entries[-1][0]
            if entries and entries[-1][0] == at:
                entries[-1] = (at, entries[-1][1] + cost)
            else:
                entries.append((at, cost))
            counted += cost
        if allowed:
            retry = 0
        elif cost > l:
            retry = None
        else:
            retry = None
            left = counted
            for t, c in entries:
                left -= c
                if left + cost <= l:
                    retry = t + w - now
                    break
            assert retry is not None
        reset = entries[-1][0] + w - now if entries else 0
        d = Decision(allowed, l, l - counted, retry, reset)
        return d, (entries, now), now + reset


def make_algorithm(spec: dict):
    kind = spec["algorithm"]
    if kind in ("token_bucket", "gcra"):
        cls = TokenBucket if kind == "token_bucket" else Gcra
        return cls(spec["capacity"], spec["tokens"], parse_duration(spec["per"]))
    cls = {"fixed_window": FixedWindow, "sliding_window": SlidingWindow, "sliding_log": SlidingLog}[kind]
    return cls(spec["limit"], parse_duration(spec["window"]))


# ---------------------------------------------------------------------------
# Policy files: the narrow YAML shape the vectors use, read and written here
# so the model needs nothing beyond the standard library.
# ---------------------------------------------------------------------------


def parse_scalar(text: str):
    text = text.strip()
    return int(text) if text.isdigit() else text


def read_policies(text: str) -> list[dict]:
    policies: list[dict] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip() or line.strip() == "policies:":
            continue
        stripped = line.strip()
        if stripped.startswith("- "):
            policies.append({})
            stripped = stripped[2:]
        key, _, value = stripped.partition(":")
        value = value.strip()
        if value.startswith("{"):
            for part in value.strip("{} ").split(","):
                k, _, v = part.partition(":")
                policies[-1][k.strip()] = parse_scalar(v)
        else:
            policies[-1][key.strip()] = parse_scalar(value)
    return policies


def write_policies(policies: list[dict]) -> str:
    out = ["policies:"]
    for p in policies:
        out.append(f"  - name: {p['name']}")
        out.append(f"    algorithm: {p['algorithm']}")
        if p["algorithm"] in ("token_bucket", "gcra"):
            out.append(f"    capacity: {p['capacity']}")
            out.append(f"    refill: {{ tokens: {p['tokens']}, per: {p['per']} }}")
        else:
            out.append(f"    limit: {p['limit']}")
            out.append(f"    window: {p['window']}")
    return "\n".join(out) + "\n"


def event_line(t: int, policy: str, key: str, cost: int) -> str:
    return json.dumps({"t_ms": t, "policy": policy, "key": key, "cost": cost}, ensure_ascii=False)


# ---------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------


def replay(policy_text: str, lines) -> list[str]:
    algorithms = {p["name"]: make_algorithm(p) for p in read_policies(policy_text)}
    states: dict = {}
    out = []
    for line in lines:
        if not line.strip():
            continue
        ev = json.loads(line)
        key = (ev["policy"], ev["key"])
        d, states[key], _ = algorithms[ev["policy"]].decide(states.get(key), ev["t_ms"], ev.get("cost", 1))
        out.append(d.line())
    return out


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------

KEYS = [
    "alice",
    "bob",
    "",
    "a|b",
    "a",
    "b|c",
    "tenant:acme|route:/orders",
    "tenant:acme",
    "ümlaut key",
    "日本語のキー",
    "emoji 🚦 key",
    'quote " and \\ backslash',
    "tab\tand\nnewline",
    "{braces}",
    "x" * 300,
]


def random_policies(rng: random.Random) -> list[dict]:
    kinds = list(ALGORITHMS) + [rng.choice(ALGORITHMS) for _ in range(rng.randint(1, 5))]
    rng.shuffle(kinds)
    policies = []
    for i, kind in enumerate(kinds):
        name = f"{kind.replace('_', '-')}-{i}"
        if kind in ("token_bucket", "gcra"):
            while True:
                tokens = rng.choice([1, 2, 3, 5, 7, 10, 13, 60, 100, 1000, rng.randint(1, 5000)])
                per = rng.choice(
                    ["1ms", "3ms", "250ms", "700ms", "1s", "3s", "7s", "10s", "1m", "90s", "1h", "1d",
                     f"{rng.randint(1, 9999)}ms"]
                )
                capacity = rng.choice([1, 2, 3, 7, 20, 100, 1000, 123_457, 10**9, rng.randint(1, 50)])
                g = math.gcd(tokens, parse_duration(per))
                n = tokens // g
                p_units = parse_duration(per) // g
                # The config's ranges: C·p below 2^53 and a refill from empty
                # below 2^52 ms; n·now below 2^53 keeps gcra exact in Lua.
                if (
                    capacity * p_units < EXACT_LIMIT
                    and ceil_div(capacity * p_units, n) < MAX_REFILL_MS
                    and n * 4_000_000_000_000 < EXACT_LIMIT
                ):
                    break
            policies.append({"name": name, "algorithm": kind, "capacity": capacity, "tokens": tokens, "per": per})
        else:
            limit = rng.choice([1, 2, 3, 5, 7, 10, 20, 100, 1000, rng.randint(1, 60)])
            if kind == "sliding_log":
                limit = min(limit, MAX_LOG_LIMIT)
            window = rng.choice(
                ["1ms", "7ms", "100ms", "700ms", "1s", "2s", "3s", "1m", "1h", "1d", f"{rng.randint(1, 9999)}ms"]
            )
            policies.append({"name": name, "algorithm": kind, "limit": limit, "window": window})
    return policies


def policy_limit(p: dict) -> int:
    return p["capacity"] if "capacity" in p else p["limit"]


def policy_span(p: dict) -> int:
    return parse_duration(p["per"] if "per" in p else p["window"])


def random_cost(rng: random.Random, limit: int) -> int:
    r = rng.random()
    if r < 0.10:
        return 0
    if r < 0.55:
        return 1
    if r < 0.75:
        return rng.randint(1, 3)
    if r < 0.85:
        return rng.randint(max(1, limit - 2), limit + 1)
    if r < 0.95:
        return rng.randint(1, max(1, limit))
    if r < 0.98:
        return limit + rng.randint(1, 1000)
    return rng.choice([10**15, 2**63, 2**64 - 1])


def generate(seed: int, count: int):
    rng = random.Random(seed)
    policies = random_policies(rng)
    algorithms = {p["name"]: make_algorithm(p) for p in policies}
    states: dict = {}
    # When each key's stored state is back to full or empty: a store may
    # forget it from then on, so once the clock has reached that instant the
    # trace must never again go below it on that key (the vectors' rule).
    full_at: dict = {}
    last_decided: dict = {}
    events, expected = [], []
    now = 1_700_000_000_000 + rng.randint(0, 10**9)
    max_seen = 0

    def emit(t: int, p: dict, key: str, cost: int) -> None:
        nonlocal max_seen
        sk = (p["name"], key)
        f = full_at.get(sk)
        if f is not None and max_seen >= f and t < f:
            t = f
        algorithm = algorithms[p["name"]]
        decision, state, f2 = algorithm.decide(states.get(sk), t, cost)
        if f is not None and max_seen >= f:
            # Forgetting the key must be unobservable: a fresh state decides alike.
            fresh, _, _ = algorithm.decide(None, t, cost)
            assert fresh == decision, (seed, t, p, key, cost, decision, fresh)
        states[sk] = state
        full_at[sk] = f2
        # The key's own now: the clamped clock where one is kept.
        seen = state[-1] if isinstance(state, tuple) else t
        last_decided[sk] = (seen, cost, decision)
        max_seen = max(max_seen, t)
        events.append(event_line(t, p["name"], key, cost))
        expected.append(decision.line())

    while len(events) < count:
        p = rng.choice(policies)
        key = rng.choice(KEYS)
        action = rng.random()
        limit, span = policy_limit(p), policy_span(p)
        if action < 0.25:
            # A burst on one key: many requests a few ms apart.
            for _ in range(rng.randint(3, 3 * min(limit, 30) + 5)):
                now += rng.choice([0, 0, 1, 1, 2, 5, rng.randint(0, max(1, span // 10))])
                emit(now, p, key, random_cost(rng, limit) if rng.random() < 0.3 else 1)
        elif action < 0.30:
            # An idle gap of hours.
            now += rng.choice([3_600_000, 36_000_000, rng.randint(1, 100) * 3_600_000 + rng.randint(0, 999)])
            emit(now, p, key, random_cost(rng, limit))
        elif action < 0.40:
            # The clock steps back, for one event or for a while, mostly onto
            # a key whose state is still live (where stepping back matters).
            live = sorted(sk for sk, f in full_at.items() if f is not None and f > max_seen)
            if live and rng.random() < 0.7:
                name, key = rng.choice(live)
                p = next(q for q in policies if q["name"] == name)
                limit, span = policy_limit(p), policy_span(p)
            back = rng.choice([1, rng.randint(1, 5000), rng.randint(1, max(1, span)), rng.randint(1, 2 * span + 1)])
            t = now - back
            if rng.random() < 0.5:
                now = t
            emit(t, p, key, random_cost(rng, limit))
        elif action < 0.50:
            # Exactly at and around the edges of a window or a refill.
            boundary = (now // span + 1) * span
            now = max(now, boundary + rng.choice([-1, 0, 0, 1]))
            emit(now, p, key, random_cost(rng, limit))
        elif action < 0.65 and last_decided:
            # Come back exactly when a decision said (or one ms before): the
            # same request after `retry_after_ms`, or anything at `reset_after_ms`.
            known = sorted(last_decided.items())
            waiting = [kv for kv in known if kv[1][2].retry_after_ms]
            (name, key), (seen, cost, decision) = rng.choice(waiting if waiting and rng.random() < 0.8 else known)
            p = next(q for q in policies if q["name"] == name)
            wait = decision.reset_after_ms
            if decision.retry_after_ms and rng.random() < 0.7:
                wait = decision.retry_after_ms
            else:
                cost = random_cost(rng, policy_limit(p))
            t = seen + wait - rng.choice([0, 0, 1])
            now = max(now, t)
            emit(t, p, key, cost)
        else:
            now += rng.choice([0, 1, rng.randint(0, 50), rng.randint(0, max(1, span)), rng.randint(0, 3 * span + 1)])
            emit(now, p, key, random_cost(rng, limit))
    return policies, events[:count], expected[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="decide the trace on stdin under this policy file")
    parser.add_argument("--seed", type=int, help="generate vectors from this seed")
    parser.add_argument("--out", help="directory for generated vectors")
    parser.add_argument("--events", type=int, default=3000, help="events to generate (default 3000)")
    args = parser.parse_args()
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            policy_text = f.read()
        stdin = open(sys.stdin.fileno(), encoding="utf-8", closefd=False)
        sys.stdout.write("".join(line + "\n" for line in replay(policy_text, stdin)))
        return 0
    if args.seed is None or not args.out:
        parser.error("give --config FILE, or --seed S --out DIR")
    policies, events, expected = generate(args.seed, args.events)
    os.makedirs(args.out, exist_ok=True)
    for name, text in (
        ("policies.yaml", write_policies(policies)),
        ("events.jsonl", "".join(e + "\n" for e in events)),
        ("expected.jsonl", "".join(e + "\n" for e in expected)),
    ):
        with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
