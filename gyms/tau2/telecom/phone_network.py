"""How tau2's simulated phone behaves: network search, data, speed, MMS and the status bar.

`PhoneBehaviour` is a mixin over a `TelecomUserDB` (`self.db`) with the rules every phone tool
and assertion relies on: which network the phone finds after a change (SIM, airplane mode,
APN, line status, mode preference and local signal), whether mobile data works, the speed a
test would measure, whether MMS can be sent, and the status-bar text. The rules and texts are
tau2-bench v1.0.1's. No tool is defined here; see `phone_tools.py`.
"""

from __future__ import annotations

from gyms.tau2.telecom.phone_models import (
    APNNames,
    MockPhoneAttributes,
    NetworkModePreference,
    NetworkStatus,
    NetworkTechnology,
    PerformanceLevel,
    SignalStrength,
    SimStatus,
    UserSurroundings,
    VpnDetails,
)

SIGNAL_ICONS = {
    SignalStrength.NONE: "📵 No Signal",
    SignalStrength.POOR: "📶¹ Poor",
    SignalStrength.FAIR: "📶² Fair",
    SignalStrength.GOOD: "📶³ Good",
    SignalStrength.EXCELLENT: "📶⁴ Excellent",
}
# Mbps range per technology and the share of it each signal level delivers.
SPEED_RANGE = {
    NetworkTechnology.TWO_G: (0.1, 0.4),
    NetworkTechnology.THREE_G: (1.0, 5.0),
    NetworkTechnology.FOUR_G: (10.0, 100.0),
    NetworkTechnology.FIVE_G: (50.0, 500.0),
    NetworkTechnology.NONE: (0.0, 0.0),
}
SIGNAL_SHARE = {
    SignalStrength.POOR: 0.2,
    SignalStrength.FAIR: 0.5,
    SignalStrength.GOOD: 0.8,
    SignalStrength.EXCELLENT: 1.0,
    SignalStrength.NONE: 0.0,
}
# Network technology a mode preference settles on (4G/5G-preferred is handled apart).
MODE_TECHNOLOGY = {
    NetworkModePreference.FOUR_G_ONLY: NetworkTechnology.FOUR_G,
    NetworkModePreference.THREE_G_ONLY: NetworkTechnology.THREE_G,
    NetworkModePreference.TWO_G_ONLY: NetworkTechnology.TWO_G,
}


def default_vpn() -> VpnDetails:
    """The VPN profile the phone connects to."""
    return VpnDetails(
        server_address="192.168.1.1",
        protocol="OpenVPN",
        server_performance=PerformanceLevel.EXCELLENT,
    )


def speed_label(mbps: float) -> str:
    if mbps < 1:
        return "Very Poor"
    if mbps < 5:
        return "Poor"
    if mbps < 25:
        return "Fair"
    if mbps < 100:
        return "Good"
    return "Excellent"


class PhoneBehaviour:
    """Rules of the simulated phone, shared by its tools, set-up functions and assertions."""

    @property
    def device(self) -> MockPhoneAttributes:
        return self.db.device

    @property
    def surroundings(self) -> UserSurroundings:
        return self.db.surroundings

    def _check_sim_status(self) -> SimStatus:
        return SimStatus.MISSING if self.device.sim_card_missing else self.device.sim_card_status

    def _lose_network(self) -> None:
        self.device.network_connection_status = NetworkStatus.NO_SERVICE
        self.device.network_technology_connected = NetworkTechnology.NONE
        self.device.network_signal_strength = SignalStrength.NONE

    def simulate_network_search(self) -> None:
        """Re-evaluate which cellular network the phone is on after any relevant change."""
        device, signal = self.device, self.surroundings.signal_strength
        if self._check_sim_status() == SimStatus.ACTIVE:
            device.network_connection_status = NetworkStatus.CONNECTED
            pref = device.network_mode_preference
            if pref == NetworkModePreference.FOUR_G_5G_PREFERRED:
                five_g = signal.get(NetworkTechnology.FIVE_G, SignalStrength.NONE)
                tech = (
                    NetworkTechnology.FOUR_G
                    if five_g == SignalStrength.NONE
                    else (NetworkTechnology.FIVE_G)
                )
            else:
                tech = MODE_TECHNOLOGY.get(pref, NetworkTechnology.FOUR_G)
            device.network_technology_connected = tech
            device.network_signal_strength = signal.get(tech, SignalStrength.NONE)
        else:
            self._lose_network()
        if (
            device.airplane_mode
            or device.active_apn_settings.apn_name == APNNames.BROKEN
            or not self.surroundings.line_active
        ):
            self._lose_network()

    def _get_mobile_data_working(self) -> bool:
        device, where = self.device, self.surroundings
        if device.airplane_mode or device.network_signal_strength == SignalStrength.NONE:
            return False
        if device.network_connection_status == NetworkStatus.NO_SERVICE:
            return False
        if where.is_abroad and not (device.roaming_enabled and where.roaming_allowed):
            return False
        return device.data_enabled and not where.mobile_data_usage_exceeded

    def _run_speed_test(self) -> tuple[float | None, str | None]:
        """(Mbps, label) of a download test on mobile data, or (None, "No Connection")."""
        if not self._get_mobile_data_working():
            return None, "No Connection"
        device = self.device
        factor = 1.0
        vpn = device.vpn_details
        if device.vpn_connected and vpn and vpn.server_performance == PerformanceLevel.POOR:
            factor = 0.1
        if device.data_saver_mode:
            factor *= 0.2
        low, high = SPEED_RANGE.get(device.network_technology_connected, (0.0, 0.0))
        share = SIGNAL_SHARE.get(device.network_signal_strength, 0.0)
        mbps = round((low + high) / 2.0 * share * factor, 2)
        return mbps, speed_label(mbps)

    def _can_send_mms(self) -> bool:
        device = self.device
        if not self._get_mobile_data_working():
            return False
        if device.network_technology_connected == NetworkTechnology.TWO_G:
            return False
        if device.wifi_calling_enabled and device.wifi_calling_mms_over_wifi:
            return False
        if device.active_apn_settings.mmsc_url is None:
            return False
        app = device.app_statuses.get("messaging")
        return app is not None and app.permissions.storage and app.permissions.sms

    def _check_status_bar(self) -> str:
        device = self.device
        parts = []
        if device.airplane_mode:
            parts.append("✈️ Airplane Mode")
        else:
            parts.append(SIGNAL_ICONS.get(device.network_signal_strength, "📵 No Signal"))
            has_network = device.network_technology_connected != NetworkTechnology.NONE
            if has_network:
                parts.append(device.network_technology_connected.value)
            if device.data_enabled and has_network:
                parts.append("📱 Data Enabled")
                if device.data_saver_mode:
                    parts.append("🔽 Data Saver")
            else:
                parts.append("📵 Data Disabled")
        if device.wifi_enabled and device.wifi_connected:
            parts.append(
                f"📡 Connected to {device.wifi_ssid}" if device.wifi_ssid else "📡 Enabled"
            )
        if device.vpn_connected:
            parts.append("🔒 VPN Connected")
        parts.append(f"🔋 {device.battery_level}%")
        return " | ".join(parts)

    def _with_status_bar(self, text: str) -> str:
        return f"{text}\nStatus Bar: {self._check_status_bar()}"

    # ---- state changes shared by tools and set-up functions --------------------------------
    def _forget_wifi_network(self) -> None:
        self.device.wifi_connected = False
        self.device.wifi_ssid = None
        self.device.wifi_signal_strength = SignalStrength.NONE

    def _toggle_airplane_mode(self) -> bool:
        device = self.device
        turning_on = not device.airplane_mode
        device.airplane_mode = turning_on
        if turning_on:
            self._forget_wifi_network()
            if device.vpn_connected:
                self._disconnect_vpn()
        else:
            device.network_connection_status = NetworkStatus.SEARCHING
            if device.wifi_enabled:
                self._forget_wifi_network()
        self.simulate_network_search()
        return device.airplane_mode

    def _toggle_data(self) -> bool:
        self.device.data_enabled = not self.device.data_enabled
        self.simulate_network_search()
        return self.device.data_enabled

    def _toggle_roaming(self) -> bool:
        self.device.roaming_enabled = not self.device.roaming_enabled
        self.simulate_network_search()
        return self.device.roaming_enabled

    def _toggle_data_saver_mode(self) -> bool:
        self.device.data_saver_mode = not self.device.data_saver_mode
        return self.device.data_saver_mode

    def _toggle_wifi_calling(self) -> bool:
        self.device.wifi_calling_enabled = not self.device.wifi_calling_enabled
        return self.device.wifi_calling_enabled

    def _connect_vpn(self) -> bool | None:
        """True once connected; None when a VPN was already connected."""
        if self.device.vpn_connected:
            return None
        self.device.vpn_connected = True
        self.device.vpn_details = self._vpn_profile()
        return True

    def _vpn_profile(self) -> VpnDetails:
        """The one VPN profile of this phone, shared by reference with `device.vpn_details`
        while connected: a fault set on it (`break_vpn`) survives disconnecting and
        reconnecting, as in tau2 (where the profile lives for the whole process; here, for
        the environment)."""
        if getattr(self, "_vpn", None) is None:
            self._vpn = default_vpn()
        return self._vpn

    def _disconnect_vpn(self) -> bool:
        if not self.device.vpn_connected:
            return False
        self.device.vpn_connected = False
        self.device.vpn_details = None
        return True
