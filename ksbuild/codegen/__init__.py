"""Codegen: IR -> plain-data view model -> jinja2 templates + the header-only prelude."""
