# One role per function, allowing exactly the AWS calls its code makes on
# exactly the resources it makes them on. The terraform tests derive the
# allowed actions from the Go interfaces each function is built on
# (dynamo.Client, connections.API, lambdaenv.SecretsClient, the keeper's
# secret source) and fail on any difference, in either direction.

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

locals {
  index_arn = "${aws_dynamodb_table.main.arn}/index/gsi1"
  # PostToConnection is POST, DeleteConnection is DELETE on
  # @connections/{id} of the relay's stage.
  manage_connections = [
    "${aws_apigatewayv2_api.relay.execution_arn}/${var.stage}/POST/@connections/*",
    "${aws_apigatewayv2_api.relay.execution_arn}/${var.stage}/DELETE/@connections/*",
  ]
}

# ---- api ----

resource "aws_iam_role" "api" {
  name               = "${var.name}-api"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

data "aws_iam_policy_document" "api" {
  statement {
    sid = "Logs"
    actions = [
      "logs:CreateLogStream",
      "logs:PutLogEvents",
    ]
    resources = ["${aws_cloudwatch_log_group.api.arn}:*"]
  }
  # The store: GetItem, PutItem, UpdateItem, DeleteItem, Query and
  # BatchGetItem (the stats counters) directly; TransactWriteItems is
  # authorised per item as PutItem, UpdateItem, DeleteItem and
  # ConditionCheckItem. Nothing the functions call scans.
  statement {
    sid = "Table"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:DeleteItem",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.main.arn, local.index_arn]
  }
  statement {
    sid       = "Connections"
    actions   = ["execute-api:ManageConnections"]
    resources = local.manage_connections
  }
  statement {
    sid       = "ListenerSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.listener.arn]
  }
  statement {
    sid       = "FeePayerSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.x402_fee_payer.arn]
  }
  statement {
    sid       = "RPCURLSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.rpc_url.arn]
  }
}

resource "aws_iam_role_policy" "api" {
  name   = "api"
  role   = aws_iam_role.api.id
  policy = data.aws_iam_policy_document.api.json
}

# ---- relay ----

resource "aws_iam_role" "relay" {
  name               = "${var.name}-relay"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

data "aws_iam_policy_document" "relay" {
  statement {
    sid = "Logs"
    actions = [
      "logs:CreateLogStream",
      "logs:PutLogEvents",
    ]
    resources = ["${aws_cloudwatch_log_group.relay.arn}:*"]
  }
  # As the API's: the relay reads the stats counters (BatchGetItem) for
  # its queue and worker gauges.
  statement {
    sid = "Table"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:DeleteItem",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.main.arn, local.index_arn]
  }
  statement {
    sid       = "Connections"
    actions   = ["execute-api:ManageConnections"]
    resources = local.manage_connections
  }
  statement {
    sid       = "ListenerSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.listener.arn]
  }
}

resource "aws_iam_role_policy" "relay" {
  name   = "relay"
  role   = aws_iam_role.relay.id
  policy = data.aws_iam_policy_document.relay.json
}

# ---- keeper ----

resource "aws_iam_role" "keeper" {
  name               = "${var.name}-keeper"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

data "aws_iam_policy_document" "keeper" {
  statement {
    sid = "Logs"
    actions = [
      "logs:CreateLogStream",
      "logs:PutLogEvents",
    ]
    resources = ["${aws_cloudwatch_log_group.keeper.arn}:*"]
  }
  statement {
    sid       = "Secrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.keeper_key.arn, aws_secretsmanager_secret.rpc_url.arn]
  }
  # Lambda delivers a run that failed every retry to the on-failure
  # destination with the function's own role (scheduler.tf).
  statement {
    sid       = "FailureDestination"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.keeper_failures.arn]
  }
  # The keeper's ledger (store.Ledger) in the gateway's table, and the
  # daily allowance it sets on accounts; open runs and owed earnings are
  # queries of the index. It never scans.
  statement {
    sid = "Ledger"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:DeleteItem",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.main.arn, local.index_arn]
  }
}

resource "aws_iam_role_policy" "keeper" {
  name   = "keeper"
  role   = aws_iam_role.keeper.id
  policy = data.aws_iam_policy_document.keeper.json
}
