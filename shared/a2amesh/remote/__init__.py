"""Remote A2A agents as members of the mesh: declarations, the proxy process and its forwarding runtime.

See docs/interop.md. ``spec.py`` (the ``remote:`` files), ``cards.py`` (fetch, check, the card the mesh sees),
``http.py`` (credentials, TLS, timeouts, retries), ``convert.py`` (SDK protobuf ↔ our models), ``runtime.py``
(one task forwarded with the a2a-sdk client), ``service.py`` (the proxy: an agent host over that runtime).
"""
