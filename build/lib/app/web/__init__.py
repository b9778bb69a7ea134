"""The dashboard and REST API (issue #4): starlette app, pages, SSE streams, security."""
