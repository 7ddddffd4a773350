"""Linking: device code in, one cubin out.

- :mod:`.device_code` reads a binary's device code (its ``__nv_relfatbin`` containers and
  build records) and the package's device run time; :mod:`._binary` resolves what names a
  binary (a module, a path);
- :mod:`._nvjitlink` finds nvJitLink and its CUDA major and checks LTO-IR versions against it;
  :mod:`.device_runtime` finds the device runtime (``libcudadevrt.a``) graph handlers need;
- :mod:`.linker` links (:func:`link_device_code`, :class:`LinkOptions`), in this process or in
  nvJitLink's isolated child (:mod:`._child`), through the on-disk cache (:mod:`.cache`);
- :mod:`.check` links every module of a wheel or an installed distribution
  (``skbuild-cudaq check``, :func:`check_package`; :mod:`._packaged` opens them).

Nothing is imported here: a lookup that needs only :mod:`._binary` loads neither nvJitLink's
search nor the cache. What an application uses is exported from :mod:`skbuild_cudaq.realtime`.
"""
