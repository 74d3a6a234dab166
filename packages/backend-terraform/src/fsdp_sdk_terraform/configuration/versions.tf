# Terraform and provider versions. The AWS provider is pinned exactly: the configuration is checked
# against that version's schema (tests/terraform/test_configuration.py).
terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "= 6.62.0"
    }
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, {
      "fsdp-sdk/cluster" = var.cluster_name
      "managed-by"       = "fsdp-sdk"
    })
  }
}

data "aws_partition" "current" {}
