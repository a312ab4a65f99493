# The relay: an API Gateway WebSocket API. Workers and API instances
# (listeners) connect to it; every route invokes the relay function, which
# answers through the @connections management API.
resource "aws_apigatewayv2_api" "relay" {
  name          = "${var.name}-relay"
  protocol_type = "WEBSOCKET"
  # Every message goes to $default: the relay protocol (relaymsg) carries
  # its own type field, and one function handles them all.
  route_selection_expression = "$request.body.type"
}

resource "aws_apigatewayv2_integration" "relay" {
  api_id                    = aws_apigatewayv2_api.relay.id
  integration_type          = "AWS_PROXY"
  integration_method        = "POST"
  integration_uri           = aws_lambda_function.relay.invoke_arn
  content_handling_strategy = "CONVERT_TO_TEXT"
  timeout_milliseconds      = 29000
}

resource "aws_apigatewayv2_route" "connect" {
  api_id    = aws_apigatewayv2_api.relay.id
  route_key = "$connect"
  target    = "integrations/${aws_apigatewayv2_integration.relay.id}"
}

resource "aws_apigatewayv2_route" "disconnect" {
  api_id    = aws_apigatewayv2_api.relay.id
  route_key = "$disconnect"
  target    = "integrations/${aws_apigatewayv2_integration.relay.id}"
}

# $default is two-way: the function's response body (a registration ack,
# an error) goes back to the sender.
resource "aws_apigatewayv2_route" "default" {
  api_id                              = aws_apigatewayv2_api.relay.id
  route_key                           = "$default"
  target                              = "integrations/${aws_apigatewayv2_integration.relay.id}"
  route_response_selection_expression = "$default"
}

resource "aws_apigatewayv2_route_response" "default" {
  api_id             = aws_apigatewayv2_api.relay.id
  route_id           = aws_apigatewayv2_route.default.id
  route_response_key = "$default"
}

resource "aws_apigatewayv2_stage" "relay" {
  api_id      = aws_apigatewayv2_api.relay.id
  name        = var.stage
  auto_deploy = true

  # Throttling protects the relay function and the table behind it from a
  # flood of messages; workers batch their chunks (batch_window_ms), so a
  # healthy fleet stays far below it.
  default_route_settings {
    throttling_rate_limit    = var.relay_throttle_rate
    throttling_burst_limit   = var.relay_throttle_burst
    detailed_metrics_enabled = true
    # Execution logging needs an account-wide CloudWatch role for API
    # Gateway; the function's own logs cover what happens.
    logging_level      = "OFF"
    data_trace_enabled = false
  }

  depends_on = [aws_apigatewayv2_route.connect, aws_apigatewayv2_route.disconnect, aws_apigatewayv2_route.default]
}

resource "aws_lambda_permission" "relay_apigw" {
  statement_id  = "AllowWebSocketAPI"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.relay.function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.relay.execution_arn}/${var.stage}/*"
}
