subject {
  plan_header = "X-Auth-Plan"
}
