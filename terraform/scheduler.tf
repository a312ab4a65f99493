# EventBridge Scheduler runs the keeper's jobs in UTC. Each target's input
# is the event the keeper function decodes (functions/cmd/keeper): the job,
# and the time the run was scheduled for, which names the day even when a
# retry lands after midnight.

resource "aws_scheduler_schedule_group" "keeper" {
  name = "${var.name}-keeper"
}

locals {
  keeper_jobs = {
    # 00:00 UTC: the stakers' daily free-credit allowance.
    allowance = "cron(0 0 * * ? *)"
    # 15:00 UTC: the treasury split, buyback and burn, staker rewards.
    rewards = "cron(0 15 * * ? *)"
    # 16:00 UTC, after the rewards run: worker payouts in USDC.
    payouts = "cron(0 16 * * ? *)"
    # Every hour at :30: the payouts workers asked for (POST /v1/payouts).
    # The keeper runs one invocation at a time, so no two payout runs
    # overlap.
    requested-payouts = "cron(30 * * * ? *)"
  }
}

resource "aws_scheduler_schedule" "keeper" {
  for_each = local.keeper_jobs

  name                         = "${var.name}-${each.key}"
  group_name                   = aws_scheduler_schedule_group.keeper.name
  schedule_expression          = each.value
  schedule_expression_timezone = "UTC"

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = aws_lambda_function.keeper.arn
    role_arn = aws_iam_role.scheduler.arn
    input = jsonencode({
      job            = each.key
      scheduled_time = "<aws.scheduler.scheduled-time>"
      execution_id   = "<aws.scheduler.execution-id>"
      attempt        = "<aws.scheduler.attempt-number>"
      # Scheduled runs ask to execute; they do only where keeper_execute
      # is true. A manual invoke without it is a dry run.
      execute = true
    })

    # These cover delivering the event to Lambda (throttled, the function
    # missing); a run that starts and fails is retried by Lambda and then
    # goes to the keeper's failure destination (lambda.tf). Both queues
    # alarm.
    retry_policy {
      maximum_event_age_in_seconds = 3600
      maximum_retry_attempts       = 3
    }

    dead_letter_config {
      arn = aws_sqs_queue.keeper_dlq.arn
    }
  }
}

resource "aws_sqs_queue" "keeper_dlq" {
  name                      = "${var.name}-keeper-dlq"
  message_retention_seconds = 1209600 # 14 days, SQS's most
  sqs_managed_sse_enabled   = true
}

data "aws_iam_policy_document" "scheduler_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  name               = "${var.name}-scheduler"
  assume_role_policy = data.aws_iam_policy_document.scheduler_assume.json
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid       = "InvokeKeeper"
    actions   = ["lambda:InvokeFunction"]
    resources = [aws_lambda_function.keeper.arn]
  }
  statement {
    sid       = "DeadLetters"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.keeper_dlq.arn]
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "scheduler"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}
