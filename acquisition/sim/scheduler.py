"""The model's event loop: SimPy's environment, which also runs plain calls from its queue.

A SimPy event is an object with a callback list, scheduled in the environment's
queue by (time, priority, event id); a process is a generator resumed by its
events' callbacks. Most of the rig model's events have exactly one callback and
nothing else waiting on them (a DMA burst's end, the gap before the next burst,
a delay before a frame is delivered): for those, :meth:`Engine.call_in` puts the
callback itself in the queue, with the id the event would have taken at the
same moment. The order of everything that happens is then SimPy's to the event,
at a fraction of the cost of making, scheduling and running an event.

This module is where the model leans on SimPy 4's internals (its queue entries
``(time, priority, id, event)``, its id counter, ``Event._ok``/``_value``):
setup.py pins SimPy below 5, and tests/test_sim_stable.py checks the order of
ties against SimPy's own processes.
"""

from __future__ import annotations

from heapq import heappop, heappush
from types import FunctionType, MethodType
from typing import Callable

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import NORMAL, URGENT, EventPriority

#: What :meth:`Engine.call_in` puts in the queue (a SimPy event is neither).
_CALLS = (FunctionType, MethodType)


class Engine(simpy.Environment):
    """A SimPy environment whose queue also holds plain calls (:meth:`call_in`)."""

    def call_in(self, delay: int, call: Callable[[], None], priority: EventPriority = NORMAL) -> None:
        """Run ``call()`` ``delay`` from now, where a ``Timeout`` made now (``priority`` NORMAL; an already
        triggered event scheduled now, URGENT) would run the one callback it was given."""
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        heappush(self._queue, (self._now + delay, priority, next(self._eid), call))

    def step(self) -> None:
        """Process the next event, or make the next call; as :meth:`simpy.Environment.step` otherwise."""
        try:
            self._now, _, _, event = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        if event.__class__ in _CALLS:
            event()
            return
        callbacks, event.callbacks = event.callbacks, None
        for k, callback in enumerate(callbacks):
            try:
                callback(event)
            except StopSimulation:
                # run(until=...) ended here: the rest of the callbacks run when the simulation resumes.
                event.callbacks = callbacks[k + 1:]
                self.schedule(event, EventPriority(-1))
                raise
        if not event._ok and not hasattr(event, "_defused"):
            # A failed event nobody handled: raise a copy of its exception, with a fresh traceback.
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc


class Later(simpy.Event):
    """An event whose maker learns only later when it is due (``Event.succeed`` takes no delay)."""

    def succeed_in(self, delay_ps: int) -> None:
        """Schedule it ``delay_ps`` from now, as a ``Timeout`` made at this moment would be."""
        self._ok = True
        self._value = None
        self.env.schedule(self, NORMAL, delay_ps)


def after_timeout(env: Engine, delay_ps: Callable[[], int], then: Callable[[], None]) -> None:
    """What ``env.process`` of a generator that waits one timeout of ``delay_ps()`` and then calls ``then()``
    does, call for event, without the generator and the process.

    The process's first step runs from an urgent event made now (SimPy's ``Initialize``), and so does
    ``delay_ps``, then the timeout is made; ``then`` runs on that timeout. Each call takes the place of one of
    those events, made at the same moment with the same priority, so SimPy's order of events (equal times by
    priority, then creation) is the same; only the process's own end, an event nothing waits for, is not made.
    """
    env.call_in(0, lambda: env.call_in(delay_ps(), then), URGENT)
