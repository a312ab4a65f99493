# CloudWatch alarms, all notifying one SNS topic (created here unless
# alarm_topic_arn names one). Each alarm's runbook entry is in this folder's README.md
# ("Alarms"), under the alarm's name without the "<name>-" prefix. The
# functions' own metrics (namespace local.metrics_namespace) are written
# by functions/metrics in the embedded metric format; the terraform tests
# check every metric an alarm reads here is one the code emits.

resource "aws_sns_topic" "alarms" {
  count = var.alarm_topic_arn == "" ? 1 : 0

  name = "${var.name}-alarms"
}

locals {
  alarm_topic   = var.alarm_topic_arn == "" ? aws_sns_topic.alarms[0].arn : var.alarm_topic_arn
  alarm_actions = [local.alarm_topic]
  functions = {
    api    = aws_lambda_function.api.function_name
    relay  = aws_lambda_function.relay.function_name
    keeper = aws_lambda_function.keeper.function_name
  }
  # Models that must keep an online worker.
  alarm_models = length(var.alarm_models) > 0 ? var.alarm_models : [for m in var.catalog : m.id]
  # How long each keeper job may go without a successful run before its
  # heartbeat alarms, in hours: a day and two hours for the daily jobs
  # (room for Lambda's retries), three hours for the hourly one.
  keeper_heartbeat_hours = {
    allowance           = 26
    rewards             = 26
    payouts             = 26
    "requested-payouts" = 3
  }
}

# ---- the functions ----

resource "aws_cloudwatch_metric_alarm" "errors" {
  for_each = local.functions

  alarm_name          = "${each.value}-errors"
  alarm_description   = "The ${each.key} function returned errors or crashed. Runbook: terraform/README.md, Alarms, errors."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = each.value }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = each.key == "keeper" ? 1 : 10
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "throttles" {
  for_each = local.functions

  alarm_name          = "${each.value}-throttles"
  alarm_description   = "The ${each.key} function hit its reserved concurrency. Runbook: terraform/README.md, Alarms, throttles."
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  dimensions          = { FunctionName = each.value }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "relay_integration_errors" {
  alarm_name          = "${var.name}-relay-integration-errors"
  alarm_description   = "The WebSocket API failed to invoke the relay function (5xx to workers). Runbook: terraform/README.md, Alarms, relay-integration-errors."
  namespace           = "AWS/ApiGateway"
  metric_name         = "IntegrationError"
  dimensions          = { ApiId = aws_apigatewayv2_api.relay.id, Stage = var.stage }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 10
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# The share of API requests answered with a 5xx, from the API's own
# counts (ServerErrors / Requests), over at least 20 requests.
resource "aws_cloudwatch_metric_alarm" "server_errors" {
  alarm_name          = "${var.name}-server-errors"
  alarm_description   = "More than ${var.server_error_percent}% of API requests in 5 minutes ended in a 5xx. Runbook: terraform/README.md, Alarms, server-errors."
  evaluation_periods  = 1
  threshold           = var.server_error_percent
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "rate"
    expression  = "IF(requests >= 20, 100 * errors / requests, 0)"
    label       = "5xx percent"
    return_data = true
  }
  metric_query {
    id = "errors"
    metric {
      namespace   = local.metrics_namespace
      metric_name = "ServerErrors"
      period      = 300
      stat        = "Sum"
    }
  }
  metric_query {
    id = "requests"
    metric {
      namespace   = local.metrics_namespace
      metric_name = "Requests"
      period      = 300
      stat        = "Sum"
    }
  }
}

# ---- the table ----

resource "aws_cloudwatch_metric_alarm" "table_throttles" {
  alarm_name          = "${var.name}-table-throttles"
  alarm_description   = "DynamoDB throttled reads or writes on the table or its index. Runbook: terraform/README.md, Alarms, table-throttles."
  evaluation_periods  = 1
  threshold           = 10
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "throttles"
    expression  = "FILL(reads, 0) + FILL(writes, 0) + FILL(index_reads, 0) + FILL(index_writes, 0)"
    label       = "throttled requests"
    return_data = true
  }
  dynamic "metric_query" {
    for_each = {
      reads        = { metric = "ReadThrottleEvents", dims = { TableName = aws_dynamodb_table.main.name } }
      writes       = { metric = "WriteThrottleEvents", dims = { TableName = aws_dynamodb_table.main.name } }
      index_reads  = { metric = "ReadThrottleEvents", dims = { TableName = aws_dynamodb_table.main.name, GlobalSecondaryIndexName = "gsi1" } }
      index_writes = { metric = "WriteThrottleEvents", dims = { TableName = aws_dynamodb_table.main.name, GlobalSecondaryIndexName = "gsi1" } }
    }
    content {
      id = metric_query.key
      metric {
        namespace   = "AWS/DynamoDB"
        metric_name = metric_query.value.metric
        dimensions  = metric_query.value.dims
        period      = 300
        stat        = "Sum"
      }
    }
  }
}

# ---- the queue and the workers ----

resource "aws_cloudwatch_metric_alarm" "queue_age" {
  alarm_name          = "${var.name}-queue-age"
  alarm_description   = "A job waited over ${var.queue_age_alarm_seconds} s for a worker. Runbook: terraform/README.md, Alarms, queue-age."
  namespace           = local.metrics_namespace
  metric_name         = "QueueWait"
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = var.queue_age_alarm_seconds * 1000
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# No worker online for any model: the gauge is written at least once a
# minute while any worker is connected, so missing data is breaching.
resource "aws_cloudwatch_metric_alarm" "no_workers" {
  alarm_name          = "${var.name}-no-workers"
  alarm_description   = "No worker has been online for 15 minutes. Runbook: terraform/README.md, Alarms, no-workers."
  namespace           = local.metrics_namespace
  metric_name         = "OnlineWorkers"
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "no_workers_for_model" {
  for_each = toset(local.alarm_models)

  alarm_name          = "${var.name}-no-workers-${replace(each.value, "/[^A-Za-z0-9_.-]/", "-")}"
  alarm_description   = "No worker has served ${each.value} for 15 minutes. Runbook: terraform/README.md, Alarms, no-workers."
  namespace           = local.metrics_namespace
  metric_name         = "OnlineWorkers"
  dimensions          = { Model = each.value }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# ---- the keeper ----

# A job with no successful run in its window: the keeper is failing, or
# not running at all (missing data is breaching).
resource "aws_cloudwatch_metric_alarm" "keeper_heartbeat" {
  for_each = local.keeper_heartbeat_hours

  alarm_name          = "${var.name}-keeper-heartbeat-${each.key}"
  alarm_description   = "No successful ${each.key} keeper run in ${each.value} hours. Runbook: terraform/README.md, Alarms, keeper-heartbeat."
  namespace           = local.metrics_namespace
  metric_name         = "KeeperRuns"
  dimensions          = { Job = each.key, Outcome = "success" }
  statistic           = "Sum"
  period              = 3600
  evaluation_periods  = each.value
  datapoints_to_alarm = each.value
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# Runs that failed Lambda's retries land in the failure destination.
resource "aws_cloudwatch_metric_alarm" "keeper_failures" {
  alarm_name          = "${var.name}-keeper-failures"
  alarm_description   = "A keeper run failed every retry; the event and error are in the failure queue. Runbook: terraform/README.md, Alarms, keeper-failures."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.keeper_failures.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# Schedules that could not deliver their event to the function at all.
resource "aws_cloudwatch_metric_alarm" "keeper_dead_letters" {
  alarm_name          = "${var.name}-keeper-dead-letters"
  alarm_description   = "Scheduler could not invoke the keeper. Runbook: terraform/README.md, Alarms, keeper-dead-letters."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.keeper_dlq.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "treasury_sol" {
  alarm_name          = "${var.name}-treasury-sol"
  alarm_description   = "The treasury holds under ${var.treasury_min_lamports} lamports, about a week of keeper fees. Runbook: terraform/README.md, Alarms, treasury-sol."
  namespace           = local.metrics_namespace
  metric_name         = "TreasuryLamports"
  statistic           = "Minimum"
  period              = 3600
  evaluation_periods  = 1
  threshold           = var.treasury_min_lamports
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# ---- before apply ----

# Reserved concurrency comes out of the account's regional limit, which
# must keep 100 unreserved: a limit too low fails the apply half way. A
# check only warns, and reading the quota needs
# servicequotas:GetServiceQuota (a warning too, if missing).
check "lambda_concurrency" {
  data "aws_servicequotas_service_quota" "lambda_concurrency" {
    service_code = "lambda"
    quota_code   = "L-B99A9384"
  }

  assert {
    condition     = data.aws_servicequotas_service_quota.lambda_concurrency.value >= max(var.api_reserved_concurrency, 0) + max(var.relay_reserved_concurrency, 0) + 1 + 100
    error_message = "The account's Lambda concurrency limit in ${var.region} (${data.aws_servicequotas_service_quota.lambda_concurrency.value}) is below the reserved concurrency (api ${var.api_reserved_concurrency}, relay ${var.relay_reserved_concurrency}, keeper 1) plus the 100 Lambda keeps unreserved: ask for an increase (Service Quotas, Lambda, Concurrent executions) or lower the reservations."
  }
}
