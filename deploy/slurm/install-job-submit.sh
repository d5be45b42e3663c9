#!/usr/bin/env bash
# Install Allot's job_submit.lua into a Slurm controller: copy it next to slurm.conf, turn on
# JobSubmitPlugins=lua, and reconfigure. Idempotent. Publish the policy snapshot first:
#   python manage.py allot_slurm_policy --cluster <name> --out /etc/slurm/allot-policy
set -euo pipefail
ETC=${SLURM_ETC:-/etc/slurm}
here=$(cd "$(dirname "$0")" && pwd)
install -m 0644 "$here/job_submit.lua" "$ETC/job_submit.lua"
if grep -q '^JobSubmitPlugins=' "$ETC/slurm.conf"; then
  sed -i 's/^JobSubmitPlugins=.*/JobSubmitPlugins=lua/' "$ETC/slurm.conf"
else
  echo 'JobSubmitPlugins=lua' >> "$ETC/slurm.conf"
fi
scontrol reconfigure
