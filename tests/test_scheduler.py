"""The model's CPU (acquisition/sim/scheduler.py's ``Cpu``) does what SimPy 4's ``PriorityResource`` of
capacity one does, step for step.

The rig model's output is byte-identical only while every event and call is queued at the same moment
as before (SimPy orders equal times by priority, then by the order things were scheduled). So these tests
run the same processes once on a real ``simpy.PriorityResource`` and once on ``Cpu``, in the same
:class:`Engine`, and compare every step the engine takes (time, priority, id, and what it was: a grant, a
release, a timeout, a process starting, an interrupt, a plain call) and everything the processes saw.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nicrig.acquisition.sim._scheduler import push as _push
from nicrig.acquisition.sim.scheduler import Cpu, CpuRequest, Engine, Later, Process, Signal
from simpy.events import NORMAL, URGENT, Initialize, Interruption, Timeout
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


# -- Process: the engine's processes against SimPy's ---------------------------------------------------------
#
# One program of processes runs three times in an Engine: on SimPy's ``simpy.Process`` (waiting with
# ``env.timeout``), on the engine's ``Process`` waiting with ``env.timeout`` events, and on it waiting with
# ``yield delay`` (an int). Every queue entry (time, priority, id, what it stands for) and everything the
# generators saw must be the same.

#: How a process waits ``d``: SimPy's way, or the engine's plain delay.
Pause = Callable[[Engine, int], object]


def _timeout(env: Engine, d: int) -> object:
    return env.timeout(d)


def _delay(env: Engine, d: int) -> object:
    return d


def _kind(item: object, priority: int) -> str:
    """What a queue entry stands for, named alike for SimPy's processes and the engine's."""
    if isinstance(item, simpy.Process):
        return "process end"
    if isinstance(item, Initialize):
        return "start"
    if isinstance(item, Timeout):
        return "timeout"
    if isinstance(item, Interruption):
        return "interruption"
    if isinstance(item, simpy.events.Condition):
        return "condition"
    if isinstance(item, simpy.Event):
        return "event"
    if isinstance(getattr(item, "__self__", None), Process):
        if priority == URGENT:
            return "start"
        # A resumption queued in place of the event of a Signal or a Later the process waits for, or of a
        # Timeout.
        return "event" if isinstance(item.__self__._target, (Signal, Later)) else "timeout"
    if getattr(item, "__name__", "") == "_ignored":
        return "timeout"  # an interrupted process's delay: SimPy's Timeout, left with no callback
    if getattr(item, "__name__", "") == "_unheard":
        return "event"  # a Signal's or a Later's end nobody waits for: SimPy's event, with no callback
    return "call"


class _EventSignal:
    """The model's ``Signal`` made of SimPy events: a fresh event a wait, succeeded by ``notify``."""

    def __init__(self, env: Engine) -> None:
        self._env = env
        self._event = env.event()

    def wait(self) -> simpy.Event:
        self._event = self._env.event()
        return self._event

    def notify(self) -> None:
        if not self._event.triggered:
            self._event.succeed()


class _EventLater(simpy.Event):
    """The model's ``Later`` as a SimPy event scheduled when its delay is known."""

    def succeed_in(self, delay_ps: int) -> None:
        self._ok = True
        self._value = None
        self.env.schedule(self, NORMAL, delay_ps)


class _ProcessTrace(Engine):
    """An Engine whose processes are SimPy's or its own, writing down every queue entry it takes."""

    def __init__(self, simpys: bool) -> None:
        super().__init__()
        self.simpys = simpys
        self.steps: list[tuple[int, int, int, str]] = []

    def process(self, generator):
        return simpy.Process(self, generator) if self.simpys else super().process(generator)

    def signal(self) -> object:
        return _EventSignal(self) if self.simpys else Signal(self)

    def on(self, signal: object) -> object:
        """What a process yields to wait for ``signal``'s next announcement."""
        return signal.wait() if self.simpys else signal

    def later(self) -> object:
        return _EventLater(self) if self.simpys else Later(self)

    def step(self) -> None:
        if self._queue:
            at, priority, eid, item = self._queue[0]
            self.steps.append((at, int(priority), eid, _kind(item, priority)))
        super().step()


def _seen(value: object, names: dict[int, str]) -> object:
    """What a generator received, comparable across runs (events by their names in the program)."""
    if isinstance(value, simpy.events.ConditionValue):
        return ("condition", tuple(names.get(id(e), type(e).__name__) for e in value.events),
                tuple(_seen(v, names) for v in value.values()))
    if isinstance(value, BaseException):
        return (type(value).__name__, value.args if not isinstance(value, simpy.Interrupt) else value.cause,
                type(value.__cause__).__name__)
    return value


def trace(program: Callable[[Engine, Pause, Callable[..., None]], None], simpys: bool, pause: Pause) -> Outcome:
    """Run ``program(env, pause, note)`` and the engine to its end; the engine's steps and the notes (time,
    active process, what was noted), and how the run ended."""
    env = _ProcessTrace(simpys)
    log: list[tuple] = []
    procs: list[object] = []
    names: dict[int, str] = {}

    def note(*what: object) -> None:
        active = env.active_process
        log.append((env.now, procs.index(active) if active in procs else active,
                    *(_seen(w, names) for w in what)))

    env.procs, env.names = procs, names
    program(env, pause, note)
    try:
        env.run()
    except Exception as error:  # a failure nobody handled ends both runs alike
        log.append(("run failed", env.now, type(error).__name__, error.args))
    return Outcome(env.steps, log)


def assert_processes_alike(program) -> Outcome:
    expected = trace(program, True, _timeout)
    for pause in (_timeout, _delay):
        got = trace(program, False, pause)
        assert got.log == expected.log
        assert got.steps == expected.steps
    return expected


def _start(env: Engine, generator) -> object:
    proc = env.process(generator)
    env.procs.append(proc)
    return proc


def test_a_process_resumes_at_once_on_an_event_already_processed_and_later_on_one_only_triggered():
    def program(env, pause, note):
        done, due = env.event(), env.event()
        env.names.update({id(done): "done", id(due): "due"})
        done.succeed("early")

        def waiter():
            yield pause(env, 2)
            note("done", (yield done))  # processed at 0: no wait
            due.succeed("now")
            note("due", (yield due))  # triggered, not processed: waits for its turn
            note("again", (yield due))
            return "bye"

        def other():
            yield pause(env, 2)
            note("other at 2")

        _start(env, waiter())
        _start(env, other())

    out = assert_processes_alike(program)
    assert [entry[2:] for entry in out.log] == [("done", "early"), ("other at 2",), ("due", "now"), ("again", "now")]
    assert [kind for *_, kind in out.steps] == ["start", "start", "event", "timeout", "timeout", "event",
                                                "process end", "process end"]


def test_a_failed_event_is_thrown_in_as_a_copy_and_a_failed_process_fails_its_waiters():
    def program(env, pause, note):
        bad = env.event()

        def fails():
            try:
                yield bad
            except KeyError as error:
                note("caught", error, error.__cause__ is not None)
            yield pause(env, 1)
            raise LookupError("gone")

        def joins(proc):
            try:
                yield proc
            except LookupError as error:
                note("child failed", error)
            return 7

        def parent(child):
            note("joined", (yield _start(env, joins(child))))

        child = _start(env, fails())
        _start(env, parent(child))
        env.call_in(3, lambda: bad.fail(KeyError("k")))

    out = assert_processes_alike(program)
    assert (3, 0, "caught", ("KeyError", ("k",), "KeyError"), True) in out.log
    assert out.log[-1] == (4, 1, "joined", 7)


def test_a_failure_nobody_waits_for_ends_the_run_when_the_process_end_is_processed():
    def program(env, pause, note):
        def fails():
            yield pause(env, 1)
            raise ValueError("nobody listens")

        def later():
            yield pause(env, 1)
            note("after the failure, same time")

        _start(env, fails())
        _start(env, later())

    out = assert_processes_alike(program)
    assert out.log == [(1, 1, "after the failure, same time"), ("run failed", 1, "ValueError", ("nobody listens",))]


def test_any_of_a_timeout_and_an_event_and_a_process_started_from_a_callback():
    def program(env, pause, note):
        kick = env.event()
        env.names[id(kick)] = "kick"

        def runs():
            value = yield env.timeout(5, "t") | kick
            note("any", value)
            value = yield env.timeout(1, "t2") | env.event()
            note("any", value)

        def started_by_a_call():
            # Started at 2 by a call queued before that timeout, it runs before it (URGENT), and its wait of
            # 0 ends before the condition that ``kick`` triggers is processed.
            note("started")
            kick.succeed("k")
            yield pause(env, 0)
            note("same time, after")

        _start(env, runs())
        env.call_in(2, lambda: _start(env, started_by_a_call()))
        env.timeout(2).callbacks.append(lambda _: note("timeout made after the call"))

    out = assert_processes_alike(program)
    assert [entry[2:] for entry in out.log] == [
        ("started",), ("timeout made after the call",), ("same time, after",),
        ("any", ("condition", ("kick",), ("k",))), ("any", ("condition", ("Timeout",), ("t2",)))]


def test_an_interrupt_takes_a_process_off_its_delay_or_its_event():
    def program(env, pause, note):
        never = env.event()

        def sleeper():
            for wait in (lambda: pause(env, 10), lambda: never, lambda: pause(env, 10)):
                try:
                    yield wait()
                    note("woke")
                except simpy.Interrupt as interrupt:
                    note("interrupted", interrupt)
            return "done"

        proc = _start(env, sleeper())

        def interrupter():
            proc.interrupt("before it starts")
            for at in (3, 4):
                yield pause(env, at - env.now)
                proc.interrupt(at)
            yield pause(env, 16)
            try:
                proc.interrupt("dead")
            except RuntimeError as error:  # its message names the process by address: not comparable
                note("refused", type(error).__name__)

        _start(env, interrupter())

    out = assert_processes_alike(program)
    assert out.log == [
        (0, 0, "interrupted", ("Interrupt", "before it starts", "Interrupt")),
        (3, 0, "interrupted", ("Interrupt", 3, "Interrupt")), (4, 0, "interrupted", ("Interrupt", 4, "Interrupt")),
        (20, 1, "refused", "RuntimeError")]
    # The delays it was taken off (due at 10 and 13) stay queued, with nothing to resume.
    assert [(at, kind) for at, _, _, kind in out.steps if at in (10, 13)] == [(10, "timeout"), (13, "timeout")]


def test_a_negative_delay_and_an_invalid_yield_fail_in_the_generator_or_the_run():
    def program(env, pause, note):
        def negative():
            try:
                yield pause(env, -1)
            except ValueError as error:
                note("negative", error)
            yield "not an event"

        _start(env, negative())

    out = assert_processes_alike(program)
    assert out.log[0] == (0, 0, "negative", ("ValueError", ("Negative delay -1",), "NoneType"))
    assert out.log[-1][:3] == ("run failed", 0, "RuntimeError")


# -- Signal and Later: a process's wait without the event ---------------------------------------------------
#
# The same programs, with the model's Signal and Later made of SimPy events in the SimPy run (``env.signal``,
# ``env.on``, ``env.later`` of _ProcessTrace pick them).


def test_a_signal_resumes_its_waiter_after_what_was_queued_before_the_announcement():
    def program(env, pause, note):
        kick = env.signal()
        kick.notify()  # nobody waits yet: SimPy's first event is scheduled all the same, with no callback

        def waiter():
            for _ in range(3):
                note("heard", (yield env.on(kick)))

        def announcer():
            yield pause(env, 2)
            env.call_in(0, lambda: note("queued before"))
            kick.notify()
            kick.notify()  # already announced since the wait: nothing
            env.call_in(0, lambda: note("queued after"))
            yield pause(env, 1)
            kick.notify()
            yield pause(env, 0)
            note("its own wait of 0 came first")
            kick.notify()

        _start(env, waiter())
        _start(env, announcer())

    out = assert_processes_alike(program)
    assert [entry[2:] for entry in out.log] == [
        ("queued before",), ("heard", None), ("queued after",), ("heard", None),
        ("its own wait of 0 came first",), ("heard", None)]
    assert [kind for *_, kind in out.steps].count("event") == 4


def test_a_signal_waited_in_a_condition_is_announced_later_with_the_condition_over():
    def program(env, pause, note):
        changed = env.signal()

        def waiter():
            note("any", (yield env.timeout(2, "t") | changed.wait()))
            note("heard", (yield env.on(changed)))
            note("any", (yield env.timeout(5, "t") | changed.wait()))

        def announcer():
            yield pause(env, 3)
            changed.notify()  # the plain wait's, after the condition's timeout won
            yield pause(env, 1)
            changed.notify()

        _start(env, waiter())
        _start(env, announcer())

    out = assert_processes_alike(program)
    assert [entry[:1] + entry[2:] for entry in out.log] == [
        (2, "any", ("condition", ("Timeout",), ("t",))), (3, "heard", None),
        (4, "any", ("condition", ("Event",), (None,)))]


def test_an_interrupted_signal_wait_leaves_the_announcement_to_nobody():
    def program(env, pause, note):
        kick = env.signal()

        def waiter():
            for _ in range(3):
                try:
                    note("heard", (yield env.on(kick)))
                except simpy.Interrupt as interrupt:
                    note("interrupted", interrupt)
                    yield pause(env, 2)

        proc = _start(env, waiter())

        def others():
            yield pause(env, 1)
            proc.interrupt("waiting")  # before the announcement
            yield pause(env, 1)
            kick.notify()  # its event is scheduled, with nobody waiting
            yield pause(env, 2)
            kick.notify()
            yield pause(env, 1)
            kick.notify()
            proc.interrupt("announced")  # after it: the Interruption (URGENT) comes first

        _start(env, others())

    out = assert_processes_alike(program)
    assert [entry[:1] + entry[2:] for entry in out.log] == [
        (1, "interrupted", ("Interrupt", "waiting", "Interrupt")), (4, "heard", None),
        (5, "interrupted", ("Interrupt", "announced", "Interrupt"))]
    assert [(at, kind) for at, _, _, kind in out.steps if kind == "event"] == [(2, "event"), (4, "event"),
                                                                               (5, "event")]


def test_a_later_known_before_or_after_its_yield_and_interrupted_before_or_after_it_is_known():
    def program(env, pause, note):
        def dma():
            known_now = env.later()
            known_now.succeed_in(3)
            note("now", (yield known_now))
            known_later = env.later()
            env.call_in(2, lambda: known_later.succeed_in(1))
            note("later", (yield known_later))
            for known_at in (4, 1):  # interrupted at 2: before it is known, after
                try:
                    abandoned = env.later()
                    env.call_in(known_at, lambda abandoned=abandoned: abandoned.succeed_in(5))
                    yield abandoned
                except simpy.Interrupt as interrupt:
                    note("interrupted", interrupt)
                yield pause(env, 10 - (env.now - 6) % 10)
            return "done"

        proc = _start(env, dma())

        def interrupter():
            for at in (8, 18):
                yield pause(env, at - env.now)
                proc.interrupt(at)

        _start(env, interrupter())

    out = assert_processes_alike(program)
    assert [entry[:1] + entry[2:] for entry in out.log] == [
        (3, "now", None), (6, "later", None), (8, "interrupted", ("Interrupt", 8, "Interrupt")),
        (18, "interrupted", ("Interrupt", 18, "Interrupt"))]
    # Both abandoned ends stay queued (due at 15 and 22), with nobody to resume.
    assert [(at, kind) for at, _, _, kind in out.steps if at in (15, 22)] == [(15, "event"), (22, "event")]


def test_a_later_is_waited_by_the_process_that_made_it():
    env = Engine()
    with pytest.raises(RuntimeError, match="made by the Process"):
        Later(env)
    made: list[Later] = []

    def maker():
        made.append(Later(env))
        yield 1

    def other():
        yield 0
        yield made[0]

    env.process(maker())
    env.process(other())
    with pytest.raises(RuntimeError, match="another process"):
        env.run()


def _failure_and_return(env: Engine, make: Callable) -> tuple:
    """A process that fails with a traceback three frames deep and one that returns a value, and another that
    waits for both: what it was given, and the frames the failure's traceback passes through."""
    seen = []

    def deep(n):
        if n == 0:
            raise KeyError("deep")
        deep(n - 1)

    def fails():
        yield env.timeout(1)
        deep(2)

    def returns():
        yield env.timeout(2)
        return ("value", 2)

    def waits(failing, returning):
        try:
            yield failing
        except KeyError as error:
            tb, frames = error.__cause__.__traceback__, []
            while tb is not None:
                frames.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            seen.append(frames)
        seen.append((yield returning))
        seen.append((failing.ok, failing.is_alive, returning.ok, returning.is_alive, returning.value))

    failing, returning = make(env, fails()), make(env, returns())
    make(env, waits(failing, returning))
    env.run()
    return tuple(map(repr, seen))


def test_a_failed_process_keeps_the_generators_traceback_and_an_ended_one_its_value_as_simpys():
    """The C step (_scheduler.c resume): a failure's traceback starts in the generator (no frame of the step),
    a returned value is the process's, as with SimPy's Process."""
    expected = _failure_and_return(Engine(), simpy.Process)
    assert expected[0] == repr(["fails", "deep", "deep", "deep"])
    assert _failure_and_return(Engine(), Process) == expected


def test_the_c_step_takes_only_the_engines_processes():
    """resume() reads and writes Process's and Engine's slots at their offsets: it refuses anything else."""
    from nicrig.acquisition.sim._scheduler import bind, resume

    with pytest.raises(TypeError, match="scheduler.Process"):
        resume(simpy.Process(simpy.Environment(), (n for n in ())))

    stray = Process.__new__(Process)
    stray.env = simpy.Environment()
    with pytest.raises(TypeError, match="scheduler.Engine"):
        resume(stray)
    with pytest.raises(TypeError, match="not a __slots__ member"):
        bind(Signal, Later, type("Plain", (), {"_now": 0}), Process)
    # the refused bind changed nothing: processes still run
    env = Engine()
    Process(env, (n for n in (1, 2)))
    env.run()
    assert env.now == 3


#: One step of a process in a random program: ("pause", d), ("wait", k): shared event k, ("succeed", k),
#: ("fail", k), ("any", d, k): a timeout of d or event k, ("spawn", d): start a child that waits d and
#: returns, ("join",): wait for the last child, ("interrupt", j), ("call", d): a plain call d ahead that
#: starts a child.
_ops = st.lists(st.one_of(
    st.tuples(st.just("pause"), st.integers(0, 3)),
    st.tuples(st.sampled_from(["wait", "succeed", "fail"]), st.integers(0, 2)),
    st.tuples(st.just("any"), st.integers(0, 3), st.integers(0, 2)),
    st.tuples(st.sampled_from(["spawn", "call"]), st.integers(0, 3)),
    st.tuples(st.just("join")),
    st.tuples(st.just("interrupt"), st.integers(0, 3)),
    st.tuples(st.sampled_from(["on", "notify"]), st.integers(0, 1)),
    st.tuples(st.sampled_from(["any on", "call notify"]), st.integers(0, 3), st.integers(0, 1)),
    st.tuples(st.just("later"), st.integers(0, 3), st.integers(0, 4)),
), min_size=1, max_size=8)


def _random_program(programs: list[list[tuple]]):
    def program(env, pause, note):
        events = [env.event() for _ in range(3)]
        env.names.update({id(e): f"e{k}" for k, e in enumerate(events)})
        signals = [env.signal() for _ in range(2)]

        def child(d):
            yield pause(env, d)
            note("child", d)
            return d

        def worker(k, ops):
            last = None
            for i, op in enumerate(ops):
                try:
                    if op[0] == "pause":
                        yield pause(env, op[1])
                    elif op[0] == "wait":
                        note("got", k, i, (yield events[op[1]]))
                    elif op[0] in ("succeed", "fail") and not events[op[1]].triggered:
                        if op[0] == "succeed":
                            events[op[1]].succeed((k, i))
                        else:
                            events[op[1]].fail(KeyError(k, i))
                    elif op[0] == "any":
                        note("any", k, i, (yield env.timeout(op[1], (k, i)) | events[op[2]]))
                    elif op[0] == "spawn":
                        last = _start(env, child(op[1]))
                    elif op[0] == "join" and last is not None:
                        note("joined", k, i, (yield last))
                    elif op[0] == "interrupt" and op[1] < len(env.procs):
                        target = env.procs[op[1]]
                        if target.is_alive and target is not env.active_process:
                            target.interrupt((k, i))
                    elif op[0] == "call":
                        env.call_in(op[1], lambda d=op[1]: _start(env, child(d)))
                    elif op[0] == "on":
                        note("heard", k, i, (yield env.on(signals[op[1]])))
                    elif op[0] == "notify":
                        signals[op[1]].notify()
                    elif op[0] == "any on":
                        note("any on", k, i, (yield env.timeout(op[1], (k, i)) | signals[op[2]].wait()))
                    elif op[0] == "call notify":
                        env.call_in(op[1], signals[op[2]].notify)
                    elif op[0] == "later":
                        # Its end known at once (0), or from a call queued ``when - 1`` ahead.
                        later, due, when = env.later(), op[1], op[2]
                        if when:
                            env.call_in(when - 1, lambda later=later, due=due: later.succeed_in(due))
                        else:
                            later.succeed_in(due)
                        note("later", k, i, (yield later))
                except (simpy.Interrupt, KeyError) as error:
                    note("threw", k, i, error)
            note("ends", k)

        for k, ops in enumerate(programs):
            _start(env, worker(k, ops))

    return program


@settings(deadline=None, max_examples=300)
@given(programs=st.lists(_ops, min_size=1, max_size=4))
@example(programs=[[("wait", 1)], [("any", 0, 1)], [("fail", 1)]])  # a failed event's exception in a condition
def test_random_programs_run_as_on_simpys_processes(programs):
    """Waits, shared events, conditions, children, interrupts, signals and Laters, mixed."""
    assert_processes_alike(_random_program(programs))


# -- the queue's C heap (_scheduler.c: push, and the pop in advance) -------------------------------------------

#: Queue keys: times of every size the model makes, beyond a long long, negative, floats; priorities.
_keys = st.tuples(st.one_of(st.integers(0, 40), st.integers(2**30, 2**31), st.integers(2**62, 2**65),
                            st.integers(-2**65, -1),
                            st.floats(0, 50, allow_nan=False)),
                  st.sampled_from([URGENT, NORMAL, -1, 2**64]))


@settings(deadline=None, max_examples=300)
@given(keys=st.lists(_keys, max_size=60), pops=st.lists(st.integers(0, 8), max_size=8), data=st.data())
def test_the_queue_is_heapqs_heap_pushed_and_popped_in_c(keys, pops, data):
    """Entries pushed by ``push`` or by ``heapq.heappush`` (as SimPy's own code does), mixed, and popped by
    ``advance``: the queue is, entry for entry, the list heapq's functions make of the same entries, and the
    calls run in the tuples' order (time, priority, then id)."""
    env, reference, ran = Engine(), [], []
    for eid, (at, priority) in enumerate(keys):
        entry = (at, priority, eid, lambda eid=eid: ran.append(eid))
        (_push if data.draw(st.booleans()) else heapq.heappush)(env._queue, entry)
        heapq.heappush(reference, entry)
    assert env._queue == reference
    taken = []
    for n in pops:
        env.advance(math.inf, limit=n)
        taken += [heapq.heappop(reference)[2] for _ in range(min(n, len(reference)))]
        assert ran == taken and env._queue == reference
    env.advance(math.inf)
    assert ran == [eid for *_, eid, _ in sorted((at, p, eid, None) for eid, (at, p) in enumerate(keys))]
