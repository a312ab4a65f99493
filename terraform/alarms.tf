# CloudWatch alarms: function errors and throttles, the relay's WebSocket
# errors, jobs that found no worker (a stuck queue), and keeper runs that
# failed every retry.

locals {
  alarm_actions = var.alarm_topic_arn == "" ? [] : [var.alarm_topic_arn]
  functions = {
    api    = aws_lambda_function.api.function_name
    relay  = aws_lambda_function.relay.function_name
    keeper = aws_lambda_function.keeper.function_name
  }
}

resource "aws_cloudwatch_metric_alarm" "errors" {
  for_each = local.functions

  alarm_name          = "${each.value}-errors"
  alarm_description   = "The ${each.key} function returned errors or crashed (see its log group)."
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
  alarm_description   = "The ${each.key} function hit its reserved concurrency: raise it or find the flood."
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
  alarm_description   = "The WebSocket API failed to invoke the relay function (5xx to workers)."
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

# The API logs {"msg":"job failed","reason":"no_worker"} when a job waited
# its whole queue time (api.DefaultLimits().QueueWait) without a worker:
# the queue is stuck for that model.
resource "aws_cloudwatch_log_metric_filter" "no_worker" {
  name           = "${var.name}-jobs-no-worker"
  log_group_name = aws_cloudwatch_log_group.api.name
  pattern        = "{ $.msg = \"job failed\" && $.reason = \"no_worker\" }"

  metric_transformation {
    name          = "JobsNoWorker"
    namespace     = "c0mpute/${var.name}"
    value         = "1"
    default_value = "0"
  }
}

resource "aws_cloudwatch_metric_alarm" "stuck_queue" {
  alarm_name          = "${var.name}-stuck-queue"
  alarm_description   = "Jobs are failing because no worker took them within the queue wait: workers are down or no one serves a requested model."
  namespace           = "c0mpute/${var.name}"
  metric_name         = aws_cloudwatch_log_metric_filter.no_worker.metric_transformation[0].name
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 2
  threshold           = 5
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "keeper_dead_letters" {
  alarm_name          = "${var.name}-keeper-dead-letters"
  alarm_description   = "A scheduled keeper run failed all its retries: run it by hand (README, keeper) and read its log."
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
