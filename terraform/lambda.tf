# One Lambda function per folder under functions/cmd, each a static Go
# binary named bootstrap on the provided.al2023 runtime, on arm64 (Graviton:
# about 20% cheaper per GB-second than x86_64 for this I/O-bound code).
# The terraform tests check every folder has its block here with these
# settings and exactly the environment its code reads.

locals {
  # https://{api-id}.execute-api.{region}.{dns-suffix}/{stage}: built from
  # the API's id rather than the stage's invoke URL, because the relay
  # function needs it and the stage depends (through the integration) on
  # that function.
  connections_url = "https://${aws_apigatewayv2_api.relay.id}.execute-api.${var.region}.${data.aws_partition.current.dns_suffix}/${var.stage}"
  relay_url       = "wss://${aws_apigatewayv2_api.relay.id}.execute-api.${var.region}.${data.aws_partition.current.dns_suffix}/${var.stage}"
  zip             = { for f in ["api", "relay", "keeper"] : f => "${path.module}/${var.lambda_dir}/${f}.zip" }
  # The catalog as the functions read it (C0MPUTE_CATALOG): the JSON array,
  # or empty for the code's default line-up.
  catalog = length(var.catalog) == 0 ? "" : jsonencode(var.catalog)
  # The functions' own metrics (functions/metrics, embedded metric format
  # in their logs) land in this CloudWatch namespace.
  metrics_namespace = "c0mpute/${var.name}"
}

resource "aws_cloudwatch_log_group" "api" {
  name              = "/aws/lambda/${var.name}-api"
  retention_in_days = var.log_retention_days
}

resource "aws_cloudwatch_log_group" "relay" {
  name              = "/aws/lambda/${var.name}-relay"
  retention_in_days = var.log_retention_days
}

resource "aws_cloudwatch_log_group" "keeper" {
  name              = "/aws/lambda/${var.name}-keeper"
  retention_in_days = var.log_retention_days
}

# The OpenAI-compatible API behind a streaming Function URL.
resource "aws_lambda_function" "api" {
  function_name    = "${var.name}-api"
  role             = aws_iam_role.api.arn
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = ["arm64"]
  filename         = local.zip.api
  source_code_hash = filebase64sha256(local.zip.api)

  # 512 MB buys about a third of a vCPU: enough to parse and re-frame a
  # stream while holding the relay listener, measured cold start ~60 ms of
  # init (README). Each instance serves one request at a time, so memory
  # is not shared between streams.
  memory_size = 512
  # A chat completion may run for api.DefaultLimits().Job (10 min) and then
  # settle (complete or refund, ~10 s of store calls): 11 min, so the
  # function is never cut off while credits are held. Function URLs allow
  # up to 15 min.
  timeout                        = 660
  reserved_concurrent_executions = var.api_reserved_concurrency

  environment {
    variables = {
      C0MPUTE_DYNAMODB_TABLE          = aws_dynamodb_table.main.name
      C0MPUTE_CONNECTIONS_URL         = local.connections_url
      C0MPUTE_RELAY_URL               = local.relay_url
      C0MPUTE_LISTENER_SECRET_ARN     = aws_secretsmanager_secret.listener.arn
      C0MPUTE_LOG_LEVEL               = var.log_level
      C0MPUTE_RATE_PER_MINUTE         = var.rate_per_minute == null ? "" : tostring(var.rate_per_minute)
      C0MPUTE_ACCOUNT_RATE_PER_MINUTE = var.account_rate_per_minute == null ? "" : tostring(var.account_rate_per_minute)
      C0MPUTE_WORKER_SHARE_PERCENT    = var.worker_share_percent == null ? "" : tostring(var.worker_share_percent)
      C0MPUTE_MAX_TOKENS_PER_SECOND   = var.max_tokens_per_second == null ? "" : tostring(var.max_tokens_per_second)
      C0MPUTE_CANARY_EVERY_SECONDS    = var.canary_every_seconds == null ? "" : tostring(var.canary_every_seconds)
      C0MPUTE_SIGNIN_DOMAIN           = var.signin_domain
      C0MPUTE_SIGNIN_CHAIN            = var.signin_chain
      C0MPUTE_CORS_ORIGINS            = join(",", var.cors_origins)
      C0MPUTE_CATALOG                 = local.catalog
      C0MPUTE_RPC_URL_ARN             = aws_secretsmanager_secret.rpc_url.arn
      C0MPUTE_METRICS_NAMESPACE       = local.metrics_namespace
      C0MPUTE_USDC_MINT               = var.keeper_config.usdc_mint
      C0MPUTE_TREASURY                = var.treasury
      C0MPUTE_STAKING_PROGRAM         = var.keeper_config.staking_program
      C0MPUTE_REWARDS_PROGRAM         = var.keeper_config.rewards_program
      C0MPUTE_ZERO_MINT               = var.keeper_config.zero_mint
      C0MPUTE_X402_NETWORK            = var.x402_network
      C0MPUTE_X402_FEE_PAYER_ARN      = aws_secretsmanager_secret.x402_fee_payer.arn
    }
  }

  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.api.name
  }

  depends_on = [aws_iam_role_policy.api, aws_secretsmanager_secret_version.listener]
}

# API Gateway HTTP APIs cannot stream; a Function URL in RESPONSE_STREAM
# mode can (lambdaurl.Start answers in that mode). Authentication is the
# API's own (API keys in the store), so the URL itself is public. CORS is
# the API's own too (functions/cors, from cors_origins, off by default):
# a cors block here would answer preflights for every origin and override
# the API's headers.
resource "aws_lambda_function_url" "api" {
  function_name      = aws_lambda_function.api.function_name
  authorization_type = "NONE"
  invoke_mode        = "RESPONSE_STREAM"
}

# A public Function URL needs both statements: InvokeFunctionUrl for the
# URL, and (for URLs created since October 2025) InvokeFunction limited to
# calls that come through a Function URL.
resource "aws_lambda_permission" "api_url" {
  statement_id           = "FunctionURLAllowPublicAccess"
  action                 = "lambda:InvokeFunctionUrl"
  function_name          = aws_lambda_function.api.function_name
  principal              = "*"
  function_url_auth_type = "NONE"
}

resource "aws_lambda_permission" "api_url_invoke" {
  statement_id             = "FunctionURLAllowInvokeFunction"
  action                   = "lambda:InvokeFunction"
  function_name            = aws_lambda_function.api.function_name
  principal                = "*"
  invoked_via_function_url = true
}

# The relay: every route of the WebSocket API invokes it.
resource "aws_lambda_function" "relay" {
  function_name    = "${var.name}-relay"
  role             = aws_iam_role.relay.arn
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = ["arm64"]
  filename         = local.zip.relay
  source_code_hash = filebase64sha256(local.zip.relay)

  # Each invocation is one message: a few store calls and a post. 256 MB
  # is plenty of memory; CPU is not the bottleneck (network round trips
  # are).
  memory_size = 256
  # API Gateway waits at most 29 s for an integration; a message that
  # takes longer than 10 s means the store is throttled, and failing fast
  # lets the worker's retry go to a fresh invocation.
  timeout                        = 10
  reserved_concurrent_executions = var.relay_reserved_concurrency

  environment {
    variables = {
      C0MPUTE_DYNAMODB_TABLE      = aws_dynamodb_table.main.name
      C0MPUTE_CONNECTIONS_URL     = local.connections_url
      C0MPUTE_LISTENER_SECRET_ARN = aws_secretsmanager_secret.listener.arn
      C0MPUTE_BATCH_WINDOW_MS     = tostring(var.batch_window_ms)
      C0MPUTE_LOG_LEVEL           = var.log_level
      C0MPUTE_CATALOG             = local.catalog
      C0MPUTE_METRICS_NAMESPACE   = local.metrics_namespace
    }
  }

  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.relay.name
  }

  depends_on = [aws_iam_role_policy.relay, aws_secretsmanager_secret_version.listener]
}

# The keeper: EventBridge Scheduler invokes it for each scheduled job.
resource "aws_lambda_function" "keeper" {
  function_name    = "${var.name}-keeper"
  role             = aws_iam_role.keeper.arn
  runtime          = "provided.al2023"
  handler          = "bootstrap"
  architectures    = ["arm64"]
  filename         = local.zip.keeper
  source_code_hash = filebase64sha256(local.zip.keeper)

  # Signing and RPC calls: light. 256 MB.
  memory_size = 256
  # A run keeps many transactions in flight and confirms them together;
  # it stops sending 15 s before this limit (keeperfn.Handler.Reserve),
  # and a run cut short fails as "incomplete" and resumes from the ledger
  # on Lambda's retry. 15 minutes is Lambda's most: a 10,000-staker day
  # needs a fraction of it (README, keeper).
  timeout = 900
  # One run at a time: two concurrent runs of one job would race on the
  # ledger and the treasury's balance.
  reserved_concurrent_executions = 1

  environment {
    variables = {
      C0MPUTE_DYNAMODB_TABLE    = aws_dynamodb_table.main.name
      C0MPUTE_KEEPER_CONFIG     = jsonencode(var.keeper_config)
      C0MPUTE_KEEPER_KEY_ARN    = aws_secretsmanager_secret.keeper_key.arn
      C0MPUTE_RPC_URL_ARN       = aws_secretsmanager_secret.rpc_url.arn
      C0MPUTE_KEEPER_EXECUTE    = tostring(var.keeper_execute)
      C0MPUTE_LOG_LEVEL         = var.log_level
      C0MPUTE_METRICS_NAMESPACE = local.metrics_namespace
    }
  }

  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.keeper.name
  }

  depends_on = [aws_iam_role_policy.keeper]
}

# Scheduler invokes the keeper asynchronously: its retry policy and
# dead-letter queue cover delivery only. What happens to a run that
# errors is set here: Lambda retries it twice (each retry resumes from the
# ledger), then delivers the event and the error to the failure queue,
# which alarms (alarms.tf).
resource "aws_lambda_function_event_invoke_config" "keeper" {
  function_name                = aws_lambda_function.keeper.function_name
  maximum_retry_attempts       = 2
  maximum_event_age_in_seconds = 21600

  destination_config {
    on_failure {
      destination = aws_sqs_queue.keeper_failures.arn
    }
  }
}

resource "aws_sqs_queue" "keeper_failures" {
  name                      = "${var.name}-keeper-failures"
  message_retention_seconds = 1209600 # 14 days, SQS's most
  sqs_managed_sse_enabled   = true
}
