"""The host path: the realtime ring and wire format served by CPU threads.

- :mod:`.dispatcher`: :class:`~.dispatcher.HostDispatcher`, a native serving loop over a ring
  (HOST_CALL handlers: Python callables and native host handlers; GRAPH_LAUNCH entries through
  :mod:`.graphs`' worker streams);
- :mod:`.handlers`: native host handlers (``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION``) found with
  :func:`~.handlers.get_host_handler`;
- :mod:`.udp`: the UDP feeder in front of a ring and the UDP client;
- :mod:`._shm`: named shared-memory rings (the test server's), checked on attach, swept;
- ``_native``: the compiled core all of them drive (sources in ``native/``).

Nothing here is imported by the device path; the package imports only the ring, the wire
format and the run time's ground (errors, driver helper, timeouts).
"""
