# The real consumers of the blocklist feeds (tests/tests/e2e/feeds.rs): nftables (`nft -f`) and
# ipset (`ipset restore`). The tests load the files inside a network namespace of their own
# (`unshare -n`, util-linux), never into the machine's firewall.
for pkg in nftables ipset; do
  if installed "$pkg"; then
    log "$pkg present"
  else
    apt_install "$pkg"
  fi
done
