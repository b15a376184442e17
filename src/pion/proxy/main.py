"""``pion-serve`` console script: parse config, run uvicorn on 127.0.0.1:8321 by default."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import uvicorn

from pion.common.errors import ConfigError
from pion.proxy.app import make_app
from pion.proxy.config import load_config


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
        app = make_app(config)
    except ConfigError as exc:
        print(f"pion-serve: {exc}", file=sys.stderr)
        return 2
    cache = "off" if not config.cache_active else f"L1 in pion-server {config.pion_host}:{config.pion_port}"
    print(f"pion-serve: backend {config.backend} ({config.effective_backend_url or 'default URL'}), cache {cache}, "
          f"listening on http://{config.host}:{config.port}", flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning",
                access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
