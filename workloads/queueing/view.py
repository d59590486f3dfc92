"""Read-only snapshots the queueing dispatcher hands to its policy (immutable tuples)."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class ServerView(NamedTuple):
    """One server as the dispatcher sees it when a request arrives."""

    number: int  # position in the pool: the value choose() returns
    name: str
    device_type: str
    idle: bool
    jobs: int  # requests queued or in service at this server
    backlog_s: float  # seconds of work already committed to this server
    est_service_s: float  # this request's service time here, alone on the device


class DispatchView(NamedTuple):
    """A request's arrival: the time, its demand and every server's state."""

    now_s: float
    request_id: int
    flops: float
    nbytes: float
    servers: tuple[ServerView, ...]


class DispatchPolicy(Protocol):
    """Decides which server a request goes to (decision point ``queueing.dispatch``).

    ``central_queue = True`` policies keep waiting requests in one FIFO queue that
    idle servers pull from; :meth:`choose` is then called only when some server is
    idle; its view then lists, for each device type with an idle server, the
    lowest-index idle server of that type, and it must return one of them.
    Otherwise the view lists every server and the request is pushed to the chosen
    server's own queue on arrival.
    """

    central_queue: bool

    def choose(self, view: DispatchView) -> int:
        """Index of the server that gets the request."""
        ...
