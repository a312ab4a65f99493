# One CloudWatch dashboard for the network: traffic, errors, latency,
# tokens, queue and workers per model, refunds, the keeper and the
# treasury. The per-model graphs use SEARCH, so new models appear without
# a change here.

locals {
  ns = local.metrics_namespace
  dashboard_widgets = [
    { title = "Requests and 5xx", stat = "Sum", metrics = [[local.ns, "Requests"], [local.ns, "ServerErrors"]] },
    { title = "Errors by code", stat = "Sum", search = "{${local.ns},Code} MetricName=\"Errors\"" },
    { title = "Time to first token (ms), p50 and p99", metrics = [[local.ns, "TTFT", { stat = "p50" }], [local.ns, "TTFT", { stat = "p99" }]] },
    { title = "Request duration (ms), p50 and p99", metrics = [[local.ns, "Duration", { stat = "p50" }], [local.ns, "Duration", { stat = "p99" }]] },
    { title = "Completion tokens by model", stat = "Sum", search = "{${local.ns},Model} MetricName=\"CompletionTokens\"" },
    { title = "Prompt tokens by model", stat = "Sum", search = "{${local.ns},Model} MetricName=\"PromptTokens\"" },
    { title = "Queue depth by model", stat = "Maximum", search = "{${local.ns},Model} MetricName=\"QueueDepth\"" },
    { title = "Online workers by model", stat = "Maximum", search = "{${local.ns},Model} MetricName=\"OnlineWorkers\"" },
    { title = "Queue wait (ms), max", stat = "Maximum", metrics = [[local.ns, "QueueWait"]] },
    { title = "Refunds by model", stat = "Sum", search = "{${local.ns},Model} MetricName=\"Refunds\"" },
    { title = "Keeper runs by job and outcome", stat = "Sum", search = "{${local.ns},Job,Outcome} MetricName=\"KeeperRuns\"" },
    { title = "Keeper transactions and fees (lamports)", stat = "Sum", metrics = [[local.ns, "KeeperTransactions"], [local.ns, "KeeperFeesLamports"]] },
    { title = "Treasury SOL (lamports)", stat = "Minimum", metrics = [[local.ns, "TreasuryLamports"]] },
    { title = "Treasury USDC (base units)", stat = "Minimum", metrics = [[local.ns, "TreasuryUSDC"]] },
    { title = "Lambda errors and throttles", stat = "Sum", metrics = concat([for f in values(local.functions) : ["AWS/Lambda", "Errors", "FunctionName", f]], [for f in values(local.functions) : ["AWS/Lambda", "Throttles", "FunctionName", f]]) },
    { title = "Table throttles", stat = "Sum", metrics = [["AWS/DynamoDB", "ReadThrottleEvents", "TableName", aws_dynamodb_table.main.name], ["AWS/DynamoDB", "WriteThrottleEvents", "TableName", aws_dynamodb_table.main.name]] },
  ]
}

resource "aws_cloudwatch_dashboard" "main" {
  dashboard_name = var.name
  dashboard_body = jsonencode({
    widgets = [for i, w in local.dashboard_widgets : {
      type   = "metric"
      x      = (i % 2) * 12
      y      = floor(i / 2) * 6
      width  = 12
      height = 6
      properties = merge({
        title  = w.title
        region = var.region
        view   = "timeSeries"
        period = 300
        }, lookup(w, "stat", null) == null ? {} : { stat = w.stat },
        # A graph lists its metrics, or finds them with a SEARCH.
        { metrics = try(w.metrics, [[{ expression = "SEARCH('${try(w.search, "")}', '${try(w.stat, "")}', 300)", id = "s${i}" }]]) },
      )
    }]
  })
}
