# TierOps in a container: the package, and the Claude Code CLI it supervises.
# Not built in CI (no Docker engine on the CI machines); kept in step with pyproject.toml.
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The CLI 2.1.197 the stream parser was built against (see ../shared/reference).
RUN npm install --prefix /opt/claude-code --no-audit --no-fund @anthropic-ai/claude-code@2.1.197
ENV PATH="/opt/claude-code/node_modules/.bin:${PATH}"

WORKDIR /srv/tierops
COPY pyproject.toml README.md ./
COPY app ./app
COPY schemas ./schemas
COPY prompts ./prompts
COPY examples ./examples
RUN pip install --no-cache-dir .

# State (SQLite) lives on a volume; the schema file is the installed copy.
ENV TIEROPS_DB=/var/lib/tierops/tierops.db \
    TIEROPS_SCHEMA_FILE=/srv/tierops/schemas/agent-response.json
VOLUME ["/var/lib/tierops"]
ENTRYPOINT ["tierops"]
CMD ["--help"]
