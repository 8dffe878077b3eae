# $1 is 0 on erase, 1 or more on upgrade.
if [ "$1" -eq 0 ]; then
  rm -f /usr/sbin/ip-masq-agent /usr/share/man/man8/ip-masq-agent.8
fi
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || :; fi
