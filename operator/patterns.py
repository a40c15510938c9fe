"""Patterns of the names and values the API server checks on the children (Secrets, PVCs,
PriorityClasses; label and taint keys and values), so a spec holding a bad one is refused on
apply. Shared by the CRD modules; imports nothing."""

# No backslashes: these also sit inside CEL string literals, where cel-go refuses "\.".
EXTENDED_RESOURCE = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
