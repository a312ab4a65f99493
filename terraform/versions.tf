terraform {
  # OpenTofu 1.8+ or Terraform 1.6+.
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 6.42 is the first version seen with aws_lambda_permission's
      # invoked_via_function_url, which public Function URLs need.
      version = ">= 6.42.0, < 7.0.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6.0, < 4.0.0"
    }
  }

  # Remote state: see README.md ("State"). Uncomment and fill in, or pass
  # -backend-config at init.
  # backend "s3" {
  #   bucket       = "my-c0mpute-tfstate"
  #   key          = "c0mpute/terraform.tfstate"
  #   region       = "eu-west-1"
  #   encrypt      = true
  #   use_lockfile = true
  # }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge({ "app" = "c0mpute", "deployment" = var.name }, var.tags)
  }
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
