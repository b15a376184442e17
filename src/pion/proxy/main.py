"""``pion-serve`` console script: parse config, run uvicorn on 127.0.0.1:8321 by default."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from pion.common.errors import ConfigError
from pion.common.logs import setup_logging
from pion.common.options import exit_on_config_error, exit_on_missing_extra
from pion.proxy.config import load_config

logger = logging.getLogger("pion.serve")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        return exit_on_config_error("pion-serve", exc)
    setup_logging("info")
    try:  # after config, so a bad flag answers fast and without the [proxy] extra's imports
        import uvicorn

        from pion.proxy.app import make_app
    except ModuleNotFoundError as exc:
        return exit_on_missing_extra("pion-serve", "proxy", exc)
    try:
        app = make_app(config)  # a bad --route-config is a config error too (exit 2)
    except ConfigError as exc:
        return exit_on_config_error("pion-serve", exc)

    cache = "off" if not config.cache_active else f"L1 in pion-server {config.pion_host}:{config.pion_port}"
    logger.info("pion-serve: backend %s (%s), cache %s, listening on http://%s:%d", config.backend,
                config.effective_backend_url or "default URL", cache, config.host, config.port)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
