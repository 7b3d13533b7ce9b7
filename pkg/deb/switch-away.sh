# rworker_switch_away: called with apache2-maintscript-helper sourced, while mpm_rworker is
# enabled and its module is about to go away. apache2 must keep exactly one loadable MPM
# (with none, "apache2ctl -t" fails with AH00534 and apache2 will not start), so:
# disable mpm_rworker, and if no other MPM is left, enable the stock MPM the administrator
# disabled last (most likely to make room for rworker), else Debian's default mpm_event.
# Everything it does is said on stderr (apache2_msg), with the commands to change it.
rworker_fallback_mpm() {
	for m in $(ls -t /var/lib/apache2/module/disabled_by_admin 2>/dev/null) mpm_event mpm_worker mpm_prefork; do
		case "$m" in
		mpm_event|mpm_worker|mpm_prefork)
			if [ -e "/etc/apache2/mods-available/$m.load" ]; then
				echo "$m"
				return 0
			fi
			;;
		esac
	done
}

rworker_switch_away() {
	local pkg=libapache2-mpm-rworker other fallback alternative
	a2dismod -m -q mpm_rworker
	for other in /etc/apache2/mods-enabled/mpm_*.load; do
		if [ -e "$other" ]; then
			other=$(basename "$other" .load)
			apache2_msg warning "$pkg: disabled mpm_rworker; apache2 keeps $other, which was enabled as well. Restart apache2 to stop using rworker: systemctl restart apache2"
			return 0
		fi
	done
	fallback=$(rworker_fallback_mpm)
	if [ -n "$fallback" ] && a2enmod -m -q "$fallback"; then
		apache2_msg warning "$pkg: mpm_rworker was apache2's MPM and is being removed: disabled mpm_rworker and ENABLED $fallback in its place, so that apache2 still has an MPM."
		apache2_msg warning "$pkg: apache2 is restarted with $fallback now if it is running; if not, run: systemctl restart apache2"
		alternative=mpm_worker
		[ "$fallback" != mpm_worker ] || alternative=mpm_event
		apache2_msg warning "$pkg: to use another MPM instead: a2dismod $fallback && a2enmod $alternative && systemctl restart apache2"
		APACHE2_NEED_ACTION=1
		apache2_reload restart
	else
		apache2_msg err "$pkg: disabled mpm_rworker, and could not enable another MPM: apache2 now has NO MPM and will not start. Run: a2enmod mpm_event && systemctl restart apache2"
	fi
}
