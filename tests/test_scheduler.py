"""The model's CPU (acquisition/sim/scheduler.py's ``Cpu``) does what SimPy 4's ``PriorityResource`` of
capacity one does, step for step.

The rig model's output is byte-identical only while every event and call is queued at the same moment
as before (SimPy orders equal times by priority, then by the order things were scheduled). So these tests
run the same processes once on a real ``simpy.PriorityResource`` and once on ``Cpu``, in the same
:class:`Engine`, and compare every step the engine takes (time, priority, id, and what it was: a grant, a
release, a timeout, a process starting, an interrupt, a plain call) and everything the processes saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.acquisition.sim.scheduler import Cpu, CpuRequest, Engine
from simpy.resources.resource import PriorityRequest, Release

#: One step of a process: ("pause", ps), ("call", ps): a plain call queued ``ps`` ahead, or
#: ("use", priority, [ps, ...]): hold the CPU across timeouts of those lengths.
Step = tuple


def _what(item: object) -> str:
    """What a queue entry is, named alike for SimPy's resource and the Cpu."""
    if isinstance(item, (PriorityRequest, CpuRequest)):
        return "grant"
    if isinstance(item, Release) or getattr(item, "__name__", "") == "_grant_next":
        return "release"
    if isinstance(item, simpy.Event):
        return type(item).__name__
    return "call"


class _TracingEngine(Engine):
    """An Engine that writes down every queue entry it takes, before it runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[int, int, int, str]] = []

    def step(self) -> None:
        if self._queue:
            at, priority, eid, item = self._queue[0]
            self.steps.append((at, int(priority), eid, _what(item)))
        super().step()


@dataclass
class Outcome:
    steps: list[tuple[int, int, int, str]]
    log: list[tuple]


def run(make_cpu: Callable[[Engine], object], processes: list[tuple[int, list[Step]]],
        interrupts: list[tuple[int, int]]) -> Outcome:
    """Run ``processes`` (start delay, steps) on one CPU, interrupting process ``k`` at ``t`` for each
    ``(t, k)`` of ``interrupts`` (if it has started and not ended); return the engine's steps and the log."""
    env = _TracingEngine()
    cpu = make_cpu(env)
    log: list[tuple] = []
    started = [False] * len(processes)

    def note(*what: object) -> None:
        log.append((env.now, cpu.count, *what))

    def worker(k: int, start: int, steps: list[Step]):
        started[k] = True
        for i, step in enumerate([("pause", start), *steps]):
            try:
                if step[0] == "pause":
                    yield env.timeout(step[1])
                elif step[0] == "call":
                    env.call_in(step[1], lambda k=k, i=i: note("call", k, i))
                else:
                    _, priority, holds = step
                    with cpu.request(priority=priority) as req:
                        note("asks", k, i, priority)
                        yield req
                        note("granted", k, i)
                        for ps in holds:
                            yield env.timeout(ps)
                    note("released", k, i)
            except simpy.Interrupt:
                note("interrupted", k, i)
        note("ends", k)

    procs = [env.process(worker(k, start, steps)) for k, (start, steps) in enumerate(processes)]

    def interrupter():
        for at, k in sorted(interrupts):
            yield env.timeout(at - env.now)
            if started[k] and procs[k].is_alive:
                procs[k].interrupt()
                note("interrupts", k)

    env.process(interrupter())
    env.run()
    return Outcome(env.steps, log)


def simpy_cpu(env: Engine) -> simpy.PriorityResource:
    return simpy.PriorityResource(env, capacity=1)


def assert_same(processes: list[tuple[int, list[Step]]], interrupts: list[tuple[int, int]] = ()) -> Outcome:
    expected = run(simpy_cpu, processes, list(interrupts))
    got = run(Cpu, processes, list(interrupts))
    assert got.log == expected.log
    assert got.steps == expected.steps
    return expected


def test_a_waiting_request_is_granted_by_priority_then_in_order_of_request():
    out = assert_same([(0, [("use", 1, [10])]), (1, [("use", 2, [1])]), (2, [("use", 1, [1])]),
                       (3, [("use", 0, [1])]), (3, [("use", 1, [1])])])
    granted = [entry[3] for entry in out.log if entry[2] == "granted"]
    assert granted == [0, 3, 2, 4, 1]


@pytest.mark.parametrize("newcomer_priority, granted", [(0, [(0, 0), (5, 2), (6, 1)]),
                                                         (2, [(0, 0), (5, 1), (6, 2)])])
def test_a_request_made_between_a_release_and_its_event_grants_the_head_of_the_queue_then(newcomer_priority,
                                                                                         granted):
    # Process 1 waits at priority 1; process 0 releases at 5, and process 2, due at 5 by a timeout queued
    # before the release's event, asks before that event runs: the CPU is free, so SimPy grants the head of
    # the queue on the spot (the newcomer, or the process waiting before it), and the release's event then
    # finds the CPU taken.
    out = assert_same([(0, [("use", 1, [5])]), (1, [("use", 1, [1])]),
                       (1, [("pause", 4), ("use", newcomer_priority, [1])])])
    assert [(entry[0], entry[3]) for entry in out.log if entry[2] == "granted"] == granted
    # The CPU is taken as soon as the newcomer has asked (the log's second column), and the release's event
    # (queued at 5 before the newcomer's timeout ran) comes after.
    assert (5, 0, "released", 0, 1) in out.log and (5, 1, "asks", 2, 2, newcomer_priority) in out.log
    assert [(at, what) for at, _, _, what in out.steps].index((5, "release")) > out.steps.index((5, 1, 10, "Timeout"))


def test_an_interrupted_request_leaves_the_queue_and_still_makes_its_release():
    out = assert_same([(0, [("use", 1, [5])]), (1, [("use", 1, [1]), ("use", 1, [1])]), (2, [("use", 1, [1])])],
                      [(3, 1)])
    assert (3, 1, "interrupted", 1, 1) in out.log  # its first use (step 0 is the start)
    assert [s[3] for s in out.steps].count("release") == 4


def test_a_closed_generator_withdraws_its_request_but_releases_nothing():
    """SimPy's ``Request.__exit__`` does not release on ``GeneratorExit`` (a process's generator collected)."""
    for make in (simpy_cpu, Cpu):
        env = Engine()
        cpu = make(env)

        def holds():
            with cpu.request(priority=0) as req:
                yield req

        holder, waiter = holds(), holds()
        next(holder)
        next(waiter)
        assert cpu.count == 1
        waiter.close()
        holder.close()
        assert cpu.count == 1
        assert not (cpu.waiting if isinstance(cpu, Cpu) else cpu.queue)
        queued = len(env._queue)
        env.run()
        assert queued == 1 and cpu.count == 1


_steps = st.lists(st.one_of(
    st.tuples(st.just("pause"), st.integers(0, 3)),
    st.tuples(st.just("call"), st.integers(0, 3)),
    st.tuples(st.just("use"), st.integers(0, 2), st.lists(st.integers(0, 3), max_size=3)),
), min_size=1, max_size=6)
_processes = st.lists(st.tuples(st.integers(0, 3), _steps), min_size=1, max_size=5)


@settings(deadline=None, max_examples=300)
@given(processes=_processes, data=st.data())
def test_random_requests_releases_timeouts_and_interrupts_run_as_on_simpys_priority_resource(processes, data):
    interrupts = data.draw(st.lists(st.tuples(st.integers(0, 12), st.integers(0, len(processes) - 1)),
                                    max_size=3))
    assert_same(processes, interrupts)
