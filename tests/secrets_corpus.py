"""Secret shapes redaction must catch: each entry is (name, text as it could appear in a session, the
secret inside it). The secrets are unique strings, so a byte search of the database files, the API
responses and the pages proves that none survived anywhere."""

from __future__ import annotations

AWS_ID = "AKIAQ3EGRTZ7EXAMPLEA"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKQ"  # 40 characters
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunV"

CORPUS: list[tuple[str, str, str]] = [
    ("anthropic key", "export ANTHROPIC_API_KEY=sk-ant-api03-Zq81xkL0aa9Pq2Ls", "sk-ant-api03-Zq81xkL0aa9Pq2Ls"),
    ("openai project key", "key sk-proj-7fJd92kLmQpZr81xWvY0aB3c", "sk-proj-7fJd92kLmQpZr81xWvY0aB3c"),
    ("github pat classic", "token ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi", "ghp_R8s7Kd92LmQp0xZ1Wv3Yb4Nc5Td6Ue7Fg8Hi"),
    ("github oauth", "gho_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "gho_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"),
    ("github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijKLMNOPQRSTuv",
     "github_pat_11ABCDEFG0123456789_abcdefghijKLMNOPQRSTuv"),
    ("gitlab pat", "GITLAB glpat-xY7zK2mN9pQ4rS6tU8vW", "glpat-xY7zK2mN9pQ4rS6tU8vW"),
    ("npm token", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("npmrc auth token", "//registry.npmjs.org/:_authToken=npmrcT0k3nValue99", "npmrcT0k3nValue99"),
    ("stripe live secret", "stripe sk_live_51HqLyjWDarjtT1zdp7dc", "sk_live_51HqLyjWDarjtT1zdp7dc"),
    ("stripe restricted", "rk_live_9aB8cD7eF6gH5iJ4kL3m", "rk_live_9aB8cD7eF6gH5iJ4kL3m"),
    ("stripe test secret", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    ("google api key", "maps AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY ok", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("aws access key id", f"aws_access_key_id = {AWS_ID}", AWS_ID),
    ("aws secret by name (ini)", "aws_secret_access_key = Xk9mQ2wE7rT4yU1iO8pA5sD3fG6hJ0kL2zX4cV7b",
     "Xk9mQ2wE7rT4yU1iO8pA5sD3fG6hJ0kL2zX4cV7b"),
    ("aws secret by name (env)", "AWS_SECRET_ACCESS_KEY=Lk3jH5gF7dS9aP0oI2uY4tR6eW8qZ1xC3vB5nM7k",
     "Lk3jH5gF7dS9aP0oI2uY4tR6eW8qZ1xC3vB5nM7k"),
    ("aws secret by shape beside its id", f"{AWS_ID},{AWS_SECRET}\n", AWS_SECRET),
    ("slack bot token", "xoxb-2401234567-2409876543210-AbCdEfGhIjKlMnOp", "xoxb-2401234567-2409876543210-AbCdEfGhIjKlMnOp"),
    ("slack user token", "xoxp-1111222233-4444555566-ZyXwVuTsRq", "xoxp-1111222233-4444555566-ZyXwVuTsRq"),
    ("slack app token", "xapp-1-A0123BCDE-9876543210-qwertyuiop", "xapp-1-A0123BCDE-9876543210-qwertyuiop"),
    ("slack webhook", "curl https://hooks.slack.com/services/T0ABCDEF/B0GHIJKL/x1y2z3w4v5u6t7s8r9q0",
     "T0ABCDEF/B0GHIJKL/x1y2z3w4v5u6t7s8r9q0"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbjQyIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r",
     "eyJzdWIiOiJhZG1pbjQyIn0"),
    ("bearer header", "Authorization: Bearer q7Zk2LmN9xWp4RtY8uVb", "q7Zk2LmN9xWp4RtY8uVb"),
    ("basic auth header", "Authorization: Basic YWRtaW46aHVudGVyMjJzZWNyZXQ=", "YWRtaW46aHVudGVyMjJzZWNyZXQ="),
    ("curl basic header", 'curl -H "Authorization: Basic ZGVwbG95OnMzY3IzdFBhc3M=" https://x',
     "ZGVwbG95OnMzY3IzdFBhc3M="),
    ("postgres url password", "DATABASE_URL=postgres://app:pgP4ssw0rdXYZ@db.internal:5432/app", "pgP4ssw0rdXYZ"),
    ("mysql url password", "mysql://root:MyRootPw_77@10.0.0.5/prod", "MyRootPw_77"),
    ("redis url password", "redis://:r3disAuthK3y@cache:6379/0", "r3disAuthK3y"),
    ("amqp url password", "amqp://guest:AmqpS3cret42@rabbit:5672/", "AmqpS3cret42"),
    ("https url password", "git clone https://deploy:GitDeployPw9@git.example.com/repo.git", "GitDeployPw9"),
    ("rsa private key", f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}1\n-----END RSA PRIVATE KEY-----", PEM_BODY + "1"),
    ("ec private key", f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}2\n-----END EC PRIVATE KEY-----", PEM_BODY + "2"),
    ("pkcs8 private key", f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}3\n-----END PRIVATE KEY-----", PEM_BODY + "3"),
    ("openssh private key", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}4\n-----END OPENSSH PRIVATE KEY-----",
     PEM_BODY + "4"),
    ("encrypted private key", f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{PEM_BODY}5\n-----END ENCRYPTED PRIVATE KEY-----",
     PEM_BODY + "5"),
    ("dsa private key", f"-----BEGIN DSA PRIVATE KEY-----\n{PEM_BODY}6\n-----END DSA PRIVATE KEY-----", PEM_BODY + "6"),
    ("pgp private key block", f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PEM_BODY}7\n-----END PGP PRIVATE KEY BLOCK-----",
     PEM_BODY + "7"),
    ("private key cut short", f"$ head -3 id_rsa\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}8\n", PEM_BODY + "8"),
    ("env _PASSWORD", "DB_PASSWORD=Tr0ub4dor&3horse", "Tr0ub4dor"),
    ("env _TOKEN", "VAULT_TOKEN=hvs.CAESIJ1k2l3m4n5o6p7", "hvs.CAESIJ1k2l3m4n5o6p7"),
    ("env _SECRET", "JWT_SECRET=jwtSigningS3cretValue", "jwtSigningS3cretValue"),
    ("env _KEY", "ENCRYPTION_KEY=a3f9c2e8b7d6e5f4a3b2", "a3f9c2e8b7d6e5f4a3b2"),
    ("env export quoted", 'export REDIS_PASSWORD="quotedRedisPw123"', "quotedRedisPw123"),
    ("yaml _password", "database:\n  db_password: yamlDbPass987", "yamlDbPass987"),
    ("yaml _token quoted", "  api_token: 'yamlApiTok456'", "yamlApiTok456"),
    ("yaml secret_key", "secret_key_base: 7d1f0c9a8b6e5d4c3b2a1f0e9d8c7b6a", "7d1f0c9a8b6e5d4c3b2a1f0e9d8c7b6a"),
    ("json _secret", '{"client_secret": "jsonClientS3cret", "id": 1}', "jsonClientS3cret"),
    ("json _key", '{"service_api_key":"jsonSvcKey12345"}', "jsonSvcKey12345"),
    ("json password", '{"password": "jsonPlainPw777"}', "jsonPlainPw777"),
    ("ini _password", "[db]\nadmin_password = iniAdminPw321", "iniAdminPw321"),
    ("ini _token", "auth_token=iniAuthTok654", "iniAuthTok654"),
    ("password=", "mysql -u root password=cliPassw0rd1", "cliPassw0rd1"),
    ("passwd:", "passwd: colonPasswd55", "colonPasswd55"),
    ("access_token query", "GET /callback?access_token=qryAccessTok888&state=1", "qryAccessTok888"),
    ("docker registry auth", '{"auths":{"r.io":{"auth":"x","registry_token":"regTok0987"}}}', "regTok0987"),
    ("anthropic key json-escaped", "SK_ESCAPED", "sk-ant-api03-EscapedKeyValue1"),  # see escaped() below
    ("url json-escaped slashes", "URL_ESCAPED", "slashPw2024"),  # https:\/\/u:slashPw2024@h
    ("credentials assignment", "app_credentials: credsValue0042", "credsValue0042"),
    ("pwd suffix", "MYSQL_ROOT_PWD=rootPwdValue11", "rootPwdValue11"),
    # camelCase and PascalCase keys, as SDKs and `aws sts get-session-token` print them
    ("aws sts session token", '{"Credentials": {"AccessKeyId": "ASIAQ3EGRTZ7EXAMPLEB", "SessionToken": '
     '"FwoGZXIvYXdzEBYaDStsSessTok0123", "Expiration": "2026-11-26T20:00:00Z"}}', "FwoGZXIvYXdzEBYaDStsSessTok0123"),
    ("camel refreshToken", '{"refreshToken": "rfrshTokVal4821"}', "rfrshTokVal4821"),
    ("camel privateKey", '{"privateKey": "prvKeyCamelVal77"}', "prvKeyCamelVal77"),
    ("camel clientSecret", 'clientSecret: clntScrtCamel55', "clntScrtCamel55"),
    ("camel apiKey", '{"apiKey":"apiKeyCamelVal31"}', "apiKeyCamelVal31"),
    ("camel accessKeyId", '{"accessKeyId": "minioAccessId9081"}', "minioAccessId9081"),
    ("camel secretAccessKey", '{"secretAccessKey": "minioSecretKey4417"}', "minioSecretKey4417"),
    # credentials named as the tools reading them name them, without a _PASSWORD/_TOKEN suffix
    ("libpq PGPASSWORD", "PGPASSWORD=pgEnvPassw0rd42", "pgEnvPassw0rd42"),
    ("mysql MYSQL_PWD yaml", "  MYSQL_PWD: mysqlEnvPwd8812", "mysqlEnvPwd8812"),
    ("redis-cli REDISCLI_AUTH", "export REDISCLI_AUTH=redisCliAuth5531", "redisCliAuth5531"),
    ("vault VAULT_TOKEN json", '{"VAULT_TOKEN": "hvs.vaultJsonTok771"}', "hvs.vaultJsonTok771"),
    ("docker DOCKER_AUTH_CONFIG", """DOCKER_AUTH_CONFIG='{"auths":{"r.io":{"auth":"ZG9ja2VyOmF1dGhDZmc5"}}}'""",
     "ZG9ja2VyOmF1dGhDZmc5"),
    ("npm NPM_TOKEN yaml", "NPM_TOKEN: npmEnvTokValue314", "npmEnvTokValue314"),
    ("rabbitmq _PASS", "RABBITMQ_DEFAULT_PASS=rabbitDefPass66", "rabbitDefPass66"),
    ("borg passphrase", "BORG_PASSPHRASE: borgPassphr4se", "borgPassphr4se"),
    ("sentry dsn", "SENTRY_DSN=https://sentryDsnKey0091@o1.ingest.sentry.io/5", "sentryDsnKey0091"),
    ("erlang cookie", "RABBITMQ_ERLANG_COOKIE=erlCookieVal2468", "erlCookieVal2468"),
    ("ldap _PW", "LDAP_BIND_PW=ldapBindPw1357", "ldapBindPw1357"),
]

ENV_SECRET_NAME = "TIEROPS_TEST_SERVICE_TOKEN"
ENV_SECRET_VALUE = "envOnlySecret-9f8e7d6c5b"  # a value with no recognisable shape: known by name only
CORPUS.append(("supervisor env var value", f"found {ENV_SECRET_VALUE} in /proc/1/environ", ENV_SECRET_VALUE))


def escaped(line: str) -> str:
    """Put the JSON-escaped shapes into a serialised stream line (the CLI prints them so when a
    tool's output was JSON that escaped them)."""
    line = line.replace("SK_ESCAPED", "sk\\u002dant\\u002dapi03\\u002dEscapedKeyValue1")
    return line.replace("URL_ESCAPED", "https:\\/\\/u:slashPw2024@h.example.com\\/x")


def secrets() -> list[str]:
    return [secret for _, _, secret in CORPUS]
