"""The gateway's settings, defined in `hedgerow.gateway_settings` (the operator reads them too)."""

from hedgerow.gateway_settings import LOG_LEVELS, GatewaySettings, parse_address

__all__ = ["LOG_LEVELS", "GatewaySettings", "parse_address"]
