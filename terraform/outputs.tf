output "api_url" {
  description = "OpenAI base URL: set OPENAI_BASE_URL to this."
  value       = "${trimsuffix(aws_lambda_function_url.api.function_url, "/")}/v1"
}

output "relay_url" {
  description = "The relay's WebSocket URL: workerd --relay (C0MPUTE_RELAY_URL)."
  value       = aws_apigatewayv2_stage.relay.invoke_url
}

output "table_name" {
  description = "The DynamoDB table."
  value       = aws_dynamodb_table.main.name
}

output "keeper_function" {
  description = "The keeper function's name, for manual runs (README)."
  value       = aws_lambda_function.keeper.function_name
}

output "keeper_key_secret_arn" {
  description = "Put the keeper's Solana keypair into this secret (README)."
  value       = aws_secretsmanager_secret.keeper_key.arn
}

output "x402_fee_payer_secret_arn" {
  description = "Put the x402 top-ups' fee payer keypair into this secret before setting x402_network (README)."
  value       = aws_secretsmanager_secret.x402_fee_payer.arn
}

output "keeper_dead_letter_queue" {
  description = "Scheduled keeper runs that failed every retry."
  value       = aws_sqs_queue.keeper_dlq.url
}

output "keeper_failure_queue" {
  description = "Keeper runs that failed every retry: each message holds the event and the error (README, Alarms, keeper-failures)."
  value       = aws_sqs_queue.keeper_failures.url
}

output "rpc_url_secret_arn" {
  description = "Put the Solana JSON-RPC URL into this secret before the functions first start (README, first apply)."
  value       = aws_secretsmanager_secret.rpc_url.arn
}

output "alarm_topic_arn" {
  description = "The SNS topic every alarm notifies: subscribe to it (aws sns subscribe --topic-arn … --protocol email --notification-endpoint you@example.com)."
  value       = local.alarm_topic
}

output "dashboard_url" {
  description = "The network's CloudWatch dashboard."
  value       = "https://${var.region}.console.aws.amazon.com/cloudwatch/home?region=${var.region}#dashboards/dashboard/${aws_cloudwatch_dashboard.main.dashboard_name}"
}
