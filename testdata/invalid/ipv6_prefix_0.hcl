subject {
  ipv6_prefix = 0
}
