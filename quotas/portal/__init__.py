"""The web portal: server-rendered pages for leads, heads, admins and viewers."""
