"""Tests for tunix_lit.agentic.orchestrator: the writer-preferring sync lock, the group queue, concurrent episodes."""
import contextlib
import itertools
import threading
import time

import numpy as np
import pytest

from tunix_lit.agentic import tools as T
from tunix_lit.agentic.orchestrator import GroupQueue, Orchestrator, SyncLock, episode_seed
from tunix_lit.agentic.trajectory import EpisodeConfig, ScriptedEngine, TrajectoryCollector
from tunix_lit.models import tiny
from tunix_lit.models.tokenizer import load_tokenizer



@pytest.fixture(scope="module")
def real(tok, cfg):
    """A collector over the shipped model through chapter 40's vanilla engine (built once)."""
    from tunix_lit.rollout.engines import VanillaEngine
    engine = VanillaEngine.build(tiny.load()[0], tok, max_prompt_length=48, max_new_tokens=16)
    return TrajectoryCollector(engine, tok, cfg)


def ideal(context: str) -> str:
    lines = context.split("\n")
    return context.rstrip("=") + "\n" if len(lines) == 1 else lines[-2]


def traj(group_id, pair_index):
    return T.Trajectory(task={}, prompt_tokens=np.zeros(1, np.int32), group_id=group_id, pair_index=pair_index)


# --- the sync lock ---------------------------------------------------------------------------------

def test_a_waiting_writer_bars_new_readers():
    """R1 inside; W waits; R2 arrives after W: the order must be W in, W out, R2 in."""
    lock, order, r1_out = SyncLock(), [], threading.Event()

    def r1():
        with lock.reading():
            order.append("R1 in")
            r1_out.wait(5)

    def w():
        with lock.writing():
            order.append("W in")
            time.sleep(0.05)
            order.append("W out")

    def r2():
        with lock.reading():
            order.append("R2 in")

    threads = [threading.Thread(target=f) for f in (r1, w, r2)]
    threads[0].start()
    time.sleep(0.05)
    threads[1].start()
    time.sleep(0.05)
    threads[2].start()
    time.sleep(0.1)
    assert order == ["R1 in"]  # W waits for R1; R2 waits for W
    r1_out.set()
    for t in threads:
        t.join(5)
    assert order == ["R1 in", "W in", "W out", "R2 in"]


def test_readers_share_and_writers_exclude():
    lock, inside, peak, writers, seen_by_writers = SyncLock(), [0], [0], [0], []
    guard = threading.Lock()

    def reader():
        with lock.reading():
            with guard:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.05)
            with guard:
                inside[0] -= 1

    def writer():
        with lock.writing():
            with guard:
                writers[0] += 1
                seen_by_writers.append((inside[0], writers[0]))  # checked in the main thread, where a failure counts
            time.sleep(0.01)
            with guard:
                writers[0] -= 1

    threads = [threading.Thread(target=reader) for _ in range(6)] + [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert seen_by_writers == [(0, 1)] * 3  # each writer was alone: no reader, no other writer
    assert peak[0] >= 2  # readers were inside together


def test_the_writer_is_not_starved_by_a_stream_of_readers():
    lock, stop_at = SyncLock(), time.monotonic() + 1.0

    def episodes():
        while time.monotonic() < stop_at:
            with lock.reading():
                time.sleep(0.03)

    threads = [threading.Thread(target=episodes) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    asked = time.monotonic()
    with lock.writing():
        waited = time.monotonic() - asked
    for t in threads:
        t.join(5)
    assert waited < 0.5  # about one episode, not the rest of the 1 s stream


# --- the group queue -------------------------------------------------------------------------------

def test_group_queue_releases_complete_groups_in_pair_order():
    q = GroupQueue(3)
    for g, p in [(0, 2), (5, 0), (0, 0), (5, 1), (0, 1), (5, 2), (7, 0)]:
        q.put(traj(g, p))
    assert [(t.group_id, t.pair_index) for t in q.get(1)] == [(0, 0), (0, 1), (0, 2)]  # group id 0 is falsy
    assert [(t.group_id, t.pair_index) for t in q.get(1)] == [(5, 0), (5, 1), (5, 2)]
    assert q.incomplete == 1
    with pytest.raises(TimeoutError, match="1 groups incomplete"):
        q.get(0.05)
    q.close()
    assert q.get(1) is None


def test_group_queue_close_drains_ready_groups_first():
    q = GroupQueue(1)
    q.put(traj(0, 0))
    q.put(traj(1, 0))
    q.close()
    assert [g[0].group_id for g in iter(q.get, None)] == [0, 1]


def test_group_queue_wakes_a_waiting_getter_and_raises_producer_errors():
    q, got = GroupQueue(2), []
    getter = threading.Thread(target=lambda: got.append(q.get(5)))
    getter.start()
    q.put(traj(3, 1))
    q.put(traj(3, 0))
    getter.join(5)
    assert [t.pair_index for t in got[0]] == [0, 1]
    q.put_error(ValueError("env factory broke"))
    with pytest.raises(ValueError, match="env factory broke"):
        q.get(1)


def test_group_queue_rejects_bad_input():
    q = GroupQueue(2)
    q.put(traj(0, 0))
    with pytest.raises(ValueError, match="repeat or outside"):
        q.put(traj(0, 0))
    with pytest.raises(ValueError, match="repeat or outside"):
        q.put(traj(1, 2))
    q.close()
    with pytest.raises(RuntimeError, match="closed"):
        q.put(traj(0, 1))
    with pytest.raises(ValueError, match="group_size"):
        GroupQueue(0)


# --- the orchestrator ------------------------------------------------------------------------------

@pytest.mark.parametrize("n,G,concurrency", [(6, 2, 1), (6, 3, 4), (5, 4, 3), (3, 1, 8)])
def test_every_episode_runs_once_and_groups_come_whole(tok, cfg, n, G, concurrency):
    collector = TrajectoryCollector(ScriptedEngine(tok, ideal, delay_s=0.005), tok, cfg)
    orch = Orchestrator(collector, T.calculator_env, group_size=G, max_concurrency=concurrency)
    groups = list(orch.start(T.sum_tasks(n, seed=n)).groups(timeout=30))
    assert sorted((t.group_id, t.pair_index) for g in groups for t in g) == [(g, p) for g in range(n) for p in range(G)]
    assert all(len(g) == G and len({t.group_id for t in g}) == 1 for g in groups)
    assert all(t.status == T.Status.SUCCEEDED and t.reward == 1.0 for g in groups for t in g)
    assert orch.peak_concurrency <= concurrency


def test_episodes_really_overlap(tok, cfg):
    collector = TrajectoryCollector(ScriptedEngine(tok, ideal, delay_s=0.05), tok, cfg)
    orch = Orchestrator(collector, T.calculator_env, group_size=4, max_concurrency=4)
    start = time.monotonic()
    list(orch.start(T.sum_tasks(2, seed=0)).groups(timeout=30))
    assert orch.peak_concurrency == 4 and time.monotonic() - start < 8 * 2 * 0.05  # less than one at a time


def test_the_producer_stays_at_most_max_groups_ahead(tok, cfg):
    made = []

    def make_env(task):
        made.append(task["prompt"])
        return T.calculator_env(task)

    collector = TrajectoryCollector(ScriptedEngine(tok, ideal), tok, cfg)
    orch = Orchestrator(collector, make_env, group_size=2, max_concurrency=8, max_groups_ahead=2)
    groups = orch.start(T.sum_tasks(10, seed=0)).groups(timeout=30)
    time.sleep(0.3)  # nobody consumes yet
    assert len(made) == 4  # two groups of two
    next(groups)
    time.sleep(0.3)
    assert len(made) == 6
    orch.stop()


class NoLock:
    """A lock that excludes nothing: the control that shows the version test can fail."""

    @contextlib.contextmanager
    def reading(self):
        yield

    @contextlib.contextmanager
    def writing(self):
        yield


def episodes_under_concurrent_syncs(tok, cfg, lock):
    """Episodes (two model turns 20 ms apart) while another thread syncs every 5 ms; each episode's versions."""
    version, stop = {"v": 0}, threading.Event()
    collector = TrajectoryCollector(ScriptedEngine(tok, ideal, delay_s=0.02), tok, cfg,
                                    policy_version=lambda: version["v"])
    orch = Orchestrator(collector, T.calculator_env, group_size=4, max_concurrency=6, lock=lock)

    def syncing():
        while not stop.is_set():
            orch.sync(lambda: version.update(v=version["v"] + 1))
            time.sleep(0.005)

    syncer = threading.Thread(target=syncing)
    syncer.start()
    try:
        groups = list(orch.start(T.sum_tasks(8, seed=0)).groups(timeout=60))
    finally:
        stop.set()
        syncer.join(5)
    return [[t.policy_version for t in traj.model_turns] for g in groups for traj in g]


def test_no_episode_mixes_policy_versions_under_a_concurrent_sync(tok, cfg):
    versions = episodes_under_concurrent_syncs(tok, cfg, SyncLock())
    assert len(versions) == 32 and all(len(v) == 2 for v in versions)
    assert all(len(set(v)) == 1 for v in versions)
    assert len({v[0] for v in versions}) > 1  # the syncs did happen between episodes


def test_without_the_lock_episodes_do_mix_versions(tok, cfg):
    versions = episodes_under_concurrent_syncs(tok, cfg, NoLock())
    assert sum(len(set(v)) > 1 for v in versions) > 0


def test_errors_reach_the_consumer(tok, cfg):
    def broken_stream():
        yield from T.sum_tasks(1, seed=0)
        raise OSError("dataset shard missing")

    collector = TrajectoryCollector(ScriptedEngine(tok, ideal), tok, cfg)
    with pytest.raises(OSError, match="shard missing"):
        list(Orchestrator(collector, T.calculator_env, group_size=2, max_concurrency=2).start(broken_stream()).groups(10))

    def model_bug(context):
        raise ZeroDivisionError("bug in the model call")

    collector = TrajectoryCollector(ScriptedEngine(tok, model_bug), tok, cfg)
    with pytest.raises(ZeroDivisionError):
        list(Orchestrator(collector, T.calculator_env, group_size=2, max_concurrency=2).start(T.sum_tasks(2)).groups(10))


def test_lifecycle_errors_and_stop(tok, cfg):
    collector = TrajectoryCollector(ScriptedEngine(tok, ideal, delay_s=0.01), tok, cfg)
    orch = Orchestrator(collector, T.calculator_env, group_size=2, max_concurrency=2)
    with pytest.raises(RuntimeError, match="start"):
        next(orch.groups())
    orch.start(itertools.cycle(T.sum_tasks(3)))  # endless
    with pytest.raises(RuntimeError, match="already started"):
        orch.start(T.sum_tasks(1))
    it = orch.groups(timeout=10)
    next(it)
    orch.stop()
    assert len(list(it)) <= 2  # what was in flight, then the end
    with pytest.raises(ValueError, match="max_concurrency"):
        Orchestrator(collector, T.calculator_env, group_size=2, max_concurrency=0)


def test_a_resumed_run_reproduces_the_rest_of_the_uninterrupted_one(real):
    """Groups 3.. of a run started at first_group=3 on tasks[3:] equal groups 3.. of the full run."""
    collector = real
    tasks = T.sum_tasks(5, digits=2, seed=4)
    run = lambda ts, first: {g[0].group_id: [t.conversation()[0].tolist() for t in g] for g in Orchestrator(
        collector, T.calculator_env, group_size=2, max_concurrency=3, seed=5).start(ts, first).groups(60)}
    full, resumed = run(tasks, 0), run(tasks[3:], 3)
    assert sorted(resumed) == [3, 4] and all(resumed[g] == full[g] for g in resumed)


def test_a_consumer_that_stops_early_stops_the_producer(tok, cfg):
    collector = TrajectoryCollector(ScriptedEngine(tok, ideal), tok, cfg)
    orch = Orchestrator(collector, T.calculator_env, group_size=2, max_concurrency=2)
    for _ in orch.start(itertools.cycle(T.sum_tasks(3))).groups(timeout=10):
        break  # the generator closes: no new episodes
    orch._producer.join(5)
    assert not orch._producer.is_alive()


def test_episode_seeds_are_distinct():
    seeds = {episode_seed(s, g, p) for s in range(3) for g in range(20) for p in range(8)}
    assert len(seeds) == 3 * 20 * 8


def test_real_model_trajectories_do_not_depend_on_concurrency(real):
    collector = real
    tasks = T.sum_tasks(4, digits=2, seed=2) + T.sum_tasks(2, digits=4, seed=2)
    runs = []
    for concurrency in (1, 4):
        orch = Orchestrator(collector, T.calculator_env, group_size=3, max_concurrency=concurrency, seed=11)
        groups = sorted(orch.start(tasks).groups(timeout=120), key=lambda g: g[0].group_id)
        runs.append([t.conversation()[0].tolist() for g in groups for t in g])
    assert runs[0] == runs[1] and len(runs[0]) == 18
    assert len({tuple(r) for r in runs[0]}) > 1  # the episodes differ from each other (seeded per episode)
