// Package terraform holds no code: it is the home of the tests that tie the
// Terraform in this folder to the Go code it deploys (functions, table
// schema, environment variables, IAM actions) and check its formatting
// with OpenTofu.
package terraform
