"""The gateway's settings, defined in `hedgerow.gateway_settings` (the operator reads them too)."""

from hedgerow.gateway_settings import GatewaySettings, parse_address
from hedgerow.logs import LOG_LEVELS

__all__ = ["LOG_LEVELS", "GatewaySettings", "parse_address"]
