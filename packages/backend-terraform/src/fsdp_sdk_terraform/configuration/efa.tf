# The security group of the GPU nodes' EFA interfaces. EFA requires a group that allows all inbound
# and all outbound traffic to and from the group itself; outbound traffic elsewhere goes through the
# NAT gateway (images, the EKS API).

resource "aws_security_group" "efa" {
  name_prefix = "${substr(var.cluster_name, 0, 40)}-efa-"
  description = "EFA traffic between the GPU nodes of ${var.cluster_name}"
  vpc_id      = aws_vpc.this.id

  tags = {
    Name = "${var.cluster_name}-efa"
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "efa_self" {
  security_group_id            = aws_security_group.efa.id
  referenced_security_group_id = aws_security_group.efa.id
  ip_protocol                  = "-1"
  description                  = "All traffic from the group (EFA)"
}

resource "aws_vpc_security_group_egress_rule" "efa_self" {
  security_group_id            = aws_security_group.efa.id
  referenced_security_group_id = aws_security_group.efa.id
  ip_protocol                  = "-1"
  description                  = "All traffic to the group (EFA)"
}

resource "aws_vpc_security_group_egress_rule" "efa_out" {
  security_group_id = aws_security_group.efa.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "All other outbound traffic"
}
