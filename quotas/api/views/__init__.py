"""REST API v1 of the quota pillar: one module per resource; declarations plus one service call per write."""
