subject {
  ipv6_prefix = 129
}
