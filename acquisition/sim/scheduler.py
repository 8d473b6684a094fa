"""The model's event loop: SimPy's environment, which also runs plain calls from its queue.

A SimPy event is an object with a callback list, scheduled in the environment's
queue by (time, priority, event id); a process is a generator resumed by its
events' callbacks. Most of the rig model's events have exactly one callback and
nothing else waiting on them (a DMA burst's end, the gap before the next burst,
a delay before a frame is delivered): for those, :meth:`Engine.call_in` puts the
callback itself in the queue, with the id the event would have taken at the
same moment. The order of everything that happens is then SimPy's to the event,
at a fraction of the cost of making, scheduling and running an event.

A host's CPU (:class:`Cpu`) is SimPy's ``PriorityResource`` of capacity one
in the same way: the grant that SimPy makes an event stays an event (a
process waits on it), the release's event, which only grants the next
waiter, is a call.

A process (:meth:`Engine.process`, :class:`Process`) is SimPy's in the same
way too: its start and the end of a delay it waits (``yield delay_ps``, an
``int``, in place of ``yield env.timeout(delay_ps)``) are calls of the
process itself, queued where SimPy queues its ``Initialize`` event and the
``Timeout``. So are the waits of a :class:`Signal` (``yield signal``, where SimPy's wait is a fresh event
the announcement succeeds) and of a :class:`Later` (a DMA's end): queued calls of the process where SimPy
schedules those events; every other event it waits on is a SimPy event, as before.

The queue stays heapq's heap of ``(time, priority, id, item)`` tuples; ``_scheduler.c`` pushes and pops
it with heapq's algorithms, comparing the three ints of an entry as C integers (SimPy's own pushes, with
heapq, keep the same heap). A process's step (``Process._resume``) is C there too.

This module is where the model leans on SimPy 4's internals (its queue entries
``(time, priority, id, event)``, its id counter, ``Event._ok``/``_value``):
setup.py pins SimPy below 5. tests/test_scheduler.py runs the same programs on
SimPy's classes and on these and compares every queue entry; tests/test_sim_stable.py
checks that the model's output is the one it gave on SimPy alone.
"""

from __future__ import annotations

import math
from itertools import count
from operator import attrgetter
from types import MethodType
from typing import Callable, Generator

import simpy
from simpy.core import EmptySchedule
from simpy.events import NORMAL, PENDING, URGENT, Event, EventPriority, Interruption, Timeout

from nicrig.acquisition.sim._scheduler import _grant_next
from nicrig.acquisition.sim._scheduler import advance as _advance
from nicrig.acquisition.sim._scheduler import after_timeout as _after_timeout
from nicrig.acquisition.sim._scheduler import bind as _bind
from nicrig.acquisition.sim._scheduler import bind_methods as _bind_methods
from nicrig.acquisition.sim._scheduler import push as _push  # heapq.heappush, comparing entries' ints in C
from nicrig.acquisition.sim._scheduler import resume as _step  # Process._resume, in C


class Engine(simpy.Environment):
    """A SimPy environment whose queue also holds plain calls (:meth:`call_in`), and whose processes are
    :class:`Process`."""

    # SimPy's attributes that _scheduler.c's advance and resume use at every step: slots, which C reads and
    # writes at their offsets (an instance attribute it would look up by name, as costly as the Python it saves).
    __slots__ = ("_now", "_queue", "_eid", "_active_proc")

    #: The current time, as SimPy's ``now``: the model asks ~80 times a simulated frame; SimPy's property runs a
    #: Python function each time, this one's getter (``attrgetter``) none.
    now = property(attrgetter("_now"), doc="The current simulation time.")

    # SimPy's ``env.process``, ``env.timeout`` and ``env.event`` are descriptors that build a bound method at
    # every use (``BoundClass.__get__``; ``bind_early`` binds only ``Environment``'s own, not a subclass's):
    # these are plain methods making the same objects.
    def process(self, generator: Generator[Event | Signal | Later | int, object, object]) -> Process:
        """Start ``generator`` as a process (:class:`Process`), as ``simpy.Environment.process``."""
        return Process(self, generator)

    def timeout(self, delay: int, value: object = None) -> Timeout:
        """An event due ``delay`` from now, as ``simpy.Environment.timeout``."""
        return Timeout(self, delay, value)

    def event(self) -> Event:
        """A new event, as ``simpy.Environment.event``."""
        return Event(self)

    def schedule(self, event: Event, priority: EventPriority = NORMAL, delay: int = 0) -> None:
        """Schedule ``event`` ``delay`` from now, as ``simpy.Environment.schedule`` (with the C push)."""
        _push(self._queue, (self._now + delay, priority, next(self._eid), event))

    def call_in(self, delay: int, call: Callable[[], None], priority: EventPriority = NORMAL) -> None:
        """Run ``call()`` ``delay`` from now, where a ``Timeout`` made now (``priority`` NORMAL; an already
        triggered event scheduled now, URGENT) would run the one callback it was given."""
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        _push(self._queue, (self._now + delay, priority, next(self._eid), call))

    def step(self) -> None:
        """Process the next event, or make the next call; as :meth:`simpy.Environment.step` otherwise."""
        if not self._queue:
            raise EmptySchedule
        self.advance(math.inf, limit=1)

    def advance(self, before: float, limit: int = -1) -> None:
        """Process every event and make every call due before ``before`` (ps; ``math.inf``: all), in order;
        at most ``limit`` of them when it is not negative.

        What ``while env.peek() < before: env.step()`` does: the loop that runs the model (and :meth:`step`,
        with ``limit`` 1), in C (``_scheduler.c``): each entry taken off the queue sets :attr:`now`, then a
        call is made, or a SimPy event's callbacks, detached from it, run in order.
        """
        _advance(self, before, limit)

    def _after_stop(self, event: Event, callbacks: list[Callable[[Event], None]], k: int) -> None:
        """Callback ``k`` of ``event`` stopped the run (``run(until=...)``): the rest run when it resumes."""
        event.callbacks = callbacks[k + 1:]
        self.schedule(event, EventPriority(-1))

    @staticmethod
    def _unhandled(event: Event) -> None:
        """``event`` failed and nothing handled it: raise a copy of its exception, with a fresh traceback."""
        exc = type(event._value)(*event._value.args)
        exc.__cause__ = event._value
        raise exc


class Later:
    """The end of something a process starts and then waits for (``yield later``), due at a moment its maker
    learns only later: SimPy's event scheduled by :meth:`succeed_in` (``Event.succeed`` takes no delay), with
    nothing but that process waiting on it, without the event.

    It is made and yielded in one step of a :class:`Process` (the process waiting is the one active when it
    is made). :meth:`succeed_in` queues the process's resumption where SimPy schedules the event (NORMAL, at
    the moment of the call, due ``delay_ps`` later), whether the process has yielded it yet or not (a
    scheduled event's callbacks are read when it is processed); the process resumes with ``None``, the
    event's value.
    """

    __slots__ = ("env", "_then", "_queued")

    def __init__(self, env: Engine):
        process = env._active_proc
        if process.__class__ is not Process:
            raise RuntimeError("a Later is made by the Process that waits for it")
        self.env = env
        #: What its end queues: the waiting process's resumption (:func:`_unheard` once it was interrupted).
        self._then = process._wake
        self._queued = False

    def succeed_in(self, delay_ps: int) -> None:
        """Schedule its end ``delay_ps`` from now, as a ``Timeout`` made at this moment would be."""
        env = self.env
        _push(env._queue, (env._now + delay_ps, NORMAL, next(env._eid), self._then))
        self._queued = True


class Signal:
    """A condition one process waits for and others announce, any number of times: what a fresh SimPy
    event made at every wait (``yield env.event()``) and succeeded by the announcement is, without the
    event.

    A waiter re-checks its condition in a loop, so an announcement with nobody waiting is harmless, and
    none is lost (check and wait happen in one step). ``yield signal`` in a :class:`Process` waits for the
    next :meth:`notify`; :meth:`wait` gives that wait as a SimPy event instead, for a condition
    (``timeout | signal.wait()``). A wait replaces the one before it: one process waits at a time.

    What SimPy does with the event, and what this does in its place: the announcement succeeds the event of
    the last wait unless it already has been (scheduled now, NORMAL); when it is processed, its waiter
    resumes with ``None``. Here :meth:`notify` queues the waiting process's resumption at that moment
    (:meth:`Engine.call_in` ``(0, ...)``); the event first made (before any wait) and one whose waiter was
    interrupted are scheduled with nobody to resume, and so is a call of nothing here (:func:`_unheard`).
    ``notify()`` is C's (``_scheduler.c``, given this class by ``bind_methods``): the model announces ~9
    conditions a simulated message.
    """

    __slots__ = ("_env", "_next")

    def __init__(self, env: Engine):
        self._env = env
        #: What the next notify does: queue this call, succeed this event, or nothing (``None``: it was
        #: announced since the last wait).
        self._next: Callable[[], None] | Event | None = _unheard

    def wait(self) -> Event:
        """The next announcement as a SimPy event (a fresh one a wait)."""
        event = self._next = Event(self._env)
        return event


def after_timeout(env: Engine, delay_ps: Callable[[], int], then: Callable[[], None]) -> None:
    """What ``env.process`` of a generator that waits one timeout of ``delay_ps()`` and then calls ``then()``
    does, call for event, without the generator and the process.

    The process's first step runs from an urgent event made now (SimPy's ``Initialize``), and so does
    ``delay_ps``, then the timeout is made; ``then`` runs on that timeout. Each call takes the place of one of
    those events, made at the same moment with the same priority, so SimPy's order of events (equal times by
    priority, then creation) is the same; only the process's own end, an event nothing waits for, is not made.
    Both calls are C's (``_scheduler.c``): the first is a method object bound to ``(env, delay_ps, then)``, so
    neither runs a Python frame of its own (a link's every frame and every interrupt timer take one).
    """
    _after_timeout(env, delay_ps, then)


class Cpu:
    """A processor one process at a time uses, granted by priority (lower first), then in order of request;
    SimPy 4.1's ``PriorityResource(env, capacity=1)`` as the model uses it, event for event.

    ``with cpu.request(priority=p) as req: yield req`` holds it for the block, as with SimPy. Here is what
    SimPy schedules, and what this class does in its place at the same moment (so with the same priority and
    the next event id):

    - ``request()`` makes a ``PriorityRequest`` and sorts it into the queue by ``(priority, time of
      request)``, a stable sort; then (``_trigger_put``) if nobody holds the resource, the head of the queue
      (not necessarily this request) is granted: ``Event.succeed()`` schedules it, NORMAL. Here the request
      is a plain :class:`CpuRequest` event, and its grant is the same ``schedule`` call. SimPy's request
      also carries a callback (``_trigger_get``) that runs before the waiting process resumes; it works the
      queue of releases, which is always empty then (a release succeeds as it is made), so it is not kept.
    - Leaving the block (``Request.__exit__``) removes a request not yet granted from the queue (an
      exception while waiting), then, unless the generator is being closed (``GeneratorExit``), releases
      it: a ``Release`` event takes the holder off the resource and is scheduled at once, NORMAL; its only
      callback (``_trigger_put`` again) grants the head of the queue when it runs, if nobody holds the
      resource by then (a request made meanwhile may have been granted straight away). Here that event is
      :meth:`Engine.call_in` ``(0, self._grant_next)``.

    Nothing is preempted (SimPy's ``PriorityResource`` ignores ``preempt``; its requests, made with the
    default ``preempt=True``, sort by priority and time alone, which is what this class takes).
    tests/test_scheduler.py runs random mixes of requests, releases, timeouts and interrupts on both and
    compares every step.

    ``request(priority=0)``, a request for the CPU at ``priority`` (lower first) granted now if the CPU is
    free, is C's (``_scheduler.c``, given this class by ``bind_methods``), as are the request's ``__exit__`` and
    the release's grant of the next waiter (``_grant_next``): five Python frames a use of the CPU, ~4 uses a
    simulated message, were as many steps of the model as its processes' own.
    """

    # What the C methods read and write at every use, as slots (see Engine's).
    __slots__ = ("env", "user", "busy", "waiting", "_order", "_release_call")

    def __init__(self, env: Engine):
        self.env = env
        self.user: CpuRequest | None = None
        #: When the CPU was granted and released, in turn (ps): its busy intervals, for a host's CPU load.
        self.busy: list[int] = []
        #: Requests not yet granted: a heap of (priority, order of request, request).
        self.waiting: list[tuple[int, int, CpuRequest]] = []
        self._order = count()
        #: What a release queues: the C grant of the next waiter, bound to this CPU (one for the run).
        self._release_call = MethodType(_grant_next, self)

    @property
    def count(self) -> int:
        """How many processes hold the CPU (0 or 1), as ``Resource.count``."""
        return 0 if self.user is None else 1


class CpuRequest(simpy.Event):
    """A request for a :class:`Cpu` (made by its ``request``, not by calling the class): an event that succeeds
    when the CPU is granted (``env``, ``callbacks``, ``_value`` as SimPy's, and ``cpu``); a context manager that
    releases it (``__enter__`` and ``__exit__``, C's: withdraw the request if it is still waiting, an
    exception while waiting, and release the CPU unless the generator is being closed, as SimPy's
    ``Request.__exit__``: the ``Release`` event made then is the CPU's ``_grant_next`` queued now, NORMAL)."""


def _ignored() -> None:
    """What an interrupted process's delay becomes in the queue (SimPy's ``Timeout`` stays there, with
    nothing left to call)."""


def _unheard() -> None:
    """What a :class:`Signal`'s or a :class:`Later`'s end with no process left to resume is in the queue
    (SimPy's event, scheduled with no callback)."""


class Process(simpy.Process):
    """A generator run as SimPy 4.1's ``Process`` runs it, schedule for schedule, with less work a step; it
    may also wait ``yield delay_ps`` (a non-negative ``int``): a ``Timeout`` of that delay made at the yield,
    without the event.

    What SimPy schedules, and what this class does in its place at the same moment (so with the same time,
    priority and the next event id, which is all the queue orders by):

    - Start: ``Process.__init__`` makes an ``Initialize`` event, scheduled now, URGENT, whose one callback
      is ``_resume``. Here :meth:`_resume` itself is queued (:meth:`Engine.call_in` ``(0, ..., URGENT)``);
      :attr:`target` is ``None`` until it runs, not that event.
    - A yielded event not yet processed: ``_resume`` is appended to its callbacks at the yield (after any
      callback given it before, such as a ``Condition``'s ``_build_value``); the same here. A delay
      (``int``): SimPy's ``env.timeout(d)`` schedules a ``Timeout`` at ``now + d``, NORMAL, with
      ``_resume`` its only callback; here :meth:`_resume` is queued there (:meth:`Engine.call_in`
      ``(d, ...)``) and :attr:`target` is ``None``. Nothing runs between a ``Timeout``'s creation and its
      yield in a ``yield env.timeout(d)``, so the id is the one it would have taken. A negative delay is
      thrown into the generator at the yield as the ``ValueError`` ``Timeout`` raises.
    - A :class:`Signal` or a :class:`Later`: SimPy's event for it has only this process waiting; the process
      is handed to it (:attr:`target` is it), and it queues :meth:`_resume` where SimPy schedules the event
      (see those classes).
    - A yielded event already processed: the generator is sent its value (thrown its exception) at once,
      in the same step, as SimPy's ``_resume`` loop does; nothing is scheduled.
    - A failed event: it is defused and a copy of its exception (``__cause__`` the original) thrown in.
    - The generator returns (raises): the process, an event, succeeds with the return value (fails with
      the exception) and is scheduled now, NORMAL, as SimPy's; processes waiting on it resume then, and
      a failure nobody waits for is raised by :meth:`Engine.advance`.
    - ``env.active_process`` is the process while its generator runs, ``None`` after, as SimPy's.
    - :meth:`interrupt` makes SimPy's ``Interruption`` (URGENT, now); when it runs, the process stops
      waiting (its ``_resume`` leaves the event's callbacks, or its queued delay becomes a call of
      nothing: SimPy's ``Timeout`` stays queued with no callback; a Signal's or Later's end, queued or
      not yet, resumes nobody) and ``Interrupt`` is thrown in.

    tests/test_scheduler.py runs the same generators on SimPy's ``Process`` and on this class and compares
    every queue entry and everything the generators saw.
    """

    # The attributes _scheduler.c's resume uses at every step, as slots (see Engine's).
    __slots__ = ("env", "_generator", "_target", "_wake")

    def __init__(self, env: Engine, generator: Generator[Event | Signal | Later | int, object, object]):
        if not hasattr(generator, "throw"):
            raise ValueError(f"{generator} is not a generator.")
        self.env = env
        self.callbacks = []
        self._generator = generator
        self._target = None
        #: The one bound method a step queues or hands an event (SimPy binds ``_resume`` anew each time): the C
        #: step bound to this process, so the queue and an event's callbacks call it with no Python frame.
        self._wake = MethodType(_step, self)
        _push(env._queue, (env._now, URGENT, next(env._eid), self._wake))

    def _resume(self, event: Event | None = None) -> None:
        """Run the generator to its next wait: sent ``event``'s value (thrown a copy of its exception), or
        ``None`` when called from the queue (the start, a delay's end); ``_scheduler.c``'s ``resume``, which
        :attr:`_wake` calls without this frame."""
        _step(self, event)

    def interrupt(self, cause: object = None) -> None:
        """Throw ``simpy.Interrupt(cause)`` into the process, as ``simpy.Process.interrupt`` (an
        ``Interruption`` event, now, URGENT)."""
        _Interruption(self, cause)

    def _stop_waiting(self) -> None:
        """Take the process off what it waits for (an interrupt came first)."""
        target = self._target
        left = _ignored
        if target.__class__ is Signal:
            if target._next is self._wake:
                target._next = _unheard
                return
            left = _unheard
        elif target.__class__ is Later:
            if not target._queued:
                target._then = _unheard
                return
            left = _unheard
        elif target is not None:
            target.callbacks.remove(self._wake)
            return
        queue = self.env._queue
        for i, (at, priority, eid, item) in enumerate(queue):
            if item is self._wake:
                queue[i] = (at, priority, eid, left)
                return


class _Interruption(Interruption):
    """SimPy's ``Interruption`` of a :class:`Process`."""

    def _interrupt(self, event: Event) -> None:
        process = self.process
        if process._value is not PENDING:
            return
        process._stop_waiting()
        process._resume(self)


_bind(Signal, Later, Engine, Process)
_bind_methods(Cpu, CpuRequest)
