"""Loading a PEM certificate chain and private key given as text into an ``ssl.SSLContext``.

The ssl module loads keys from files only, so the text goes to a private directory (0700, files
0600) that lives for the call. The broker (inline ``ssl.keystore.certificate.chain`` /
``ssl.keystore.key``) and the CLI (the same client properties) both use it.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path


def load_pem_cert_chain(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """``ctx.load_cert_chain`` from PEM text; raises what it raises (ssl.SSLError, OSError, ValueError)."""
    with tempfile.TemporaryDirectory(prefix="tierlog-tls-") as tmp:
        paths: list[Path] = []
        for name, data in (("chain.pem", chain), ("key.pem", key)):
            path = Path(tmp, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(data)
            paths.append(path)
        ctx.load_cert_chain(paths[0], paths[1], password=password)
