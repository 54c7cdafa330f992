"""Replica choice: balance under load, prefix affinity while balanced."""
import random

from router.policy import ReplicaChooser


def test_load_spreads_evenly_without_shared_prefixes():
    ch = ReplicaChooser([f"r{i}" for i in range(4)], affinity_tokens=64)
    rng = random.Random(1)
    inflight = []
    for _ in range(4000):
        r = ch.choose([rng.randrange(1000) for _ in range(10)])  # short prompts: no affinity
        cost = rng.randrange(50, 500)
        ch.started(r, cost)
        inflight.append((r, cost))
        if len(inflight) > 64:  # closed loop of 64 requests
            ch.finished(*inflight.pop(rng.randrange(len(inflight))))
    loads = sorted(ch.outstanding.values())
    assert loads[-1] <= 1.6 * loads[0] + 500


def test_shared_prefix_goes_home_until_the_home_is_overloaded():
    ch = ReplicaChooser(["a", "b", "c"], affinity_tokens=8)
    prefix = list(range(8))
    first = ch.choose(prefix + [100])
    assert all(ch.choose(prefix + [i]) == first for i in range(20))  # idle cluster: always home
    ch.started(first, 10_000)
    assert ch.choose(prefix + [5]) != first  # home far above the others: balance wins


def test_a_failed_replica_is_avoided_while_others_remain():
    ch = ReplicaChooser(["a", "b"], affinity_tokens=8, sick_s=60)
    prefix = list(range(8))
    home = ch.choose(prefix)
    ch.failed(home)
    assert all(ch.choose(prefix + [i]) != home for i in range(20))  # not even its own prefix goes there
    ch.failed("a" if home == "b" else "b")
    assert ch.choose(prefix) in {"a", "b"}  # every replica sick: still answer (Serve may have replaced them)
    assert ch.choose([1], avoid={"a"}) == "b"
