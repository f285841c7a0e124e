subject {
  ipv6_prefix = -3
}
