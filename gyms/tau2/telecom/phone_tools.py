"""The customer's toolkit in tau2's telecom domain: what they can check and change on the phone.

Tools are what the simulated customer (or, in solo mode, the agent) may call: status checks,
toggles for airplane mode, data, roaming, data saver, Wi-Fi and Wi-Fi calling, SIM re-seating,
APN reset, VPN, app permissions, reboot, and paying a bill the agent requested. Every result
text is tau2-bench v1.0.1's. Set-up functions (`set_user_info`, `break_*`, `turn_*`,
`unseat_sim_card`, ...) and assertions (`assert_*`) are environment functions that tasks call
by name; they are in `phone_setup.py`. The rules behind them are in `phone_network.py`.
Annotations stay evaluated (no postponed annotations): the tool schemas are built from them.
"""

from gyms.common.tool_docs import shared_args
from gyms.tau2.telecom.phone_models import (
    APNSettings,
    NetworkModePreference,
    NetworkStatus,
    SimStatus,
    TelecomUserDB,
)
from gyms.tau2.telecom.phone_network import PhoneBehaviour
from gyms.tau2.telecom.phone_setup import PhoneSetup
from gyms.tau2.toolkit import READ, WRITE, Toolkit, tool

SPEED_ADVICE = {
    "Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
    "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
    "Fair": "Connection is okay for web browsing and some standard definition streaming.",
    "Good": "Connection is good for most activities, including HD streaming.",
    "Excellent": "Connection is very fast.",
}
SIM_TEXT = {
    SimStatus.ACTIVE: "Your SIM card is active and working.",
    SimStatus.MISSING: "No SIM card detected in the phone.",
    SimStatus.LOCKED_PIN: "The SIM card is locked with a PIN code.",
    SimStatus.LOCKED_PUK: "The SIM card is locked with a PUK code.",
}


def _on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


# What an argument of these names means in every tool that takes it (`shared_args`).
_SHARED_ARGS = {
    "app_name": "The app to look at.",
}


@shared_args(_SHARED_ARGS)
class TelecomUserTools(PhoneSetup, PhoneBehaviour, Toolkit):
    """Phone tools over a `TelecomUserDB` (the class name appears in argument-error messages)."""

    db: TelecomUserDB

    @tool(READ)
    def check_status_bar(self) -> str:
        """Show the icons in the phone's status bar: signal, network type, mobile data, data saver, Wi-Fi, VPN and battery."""
        return f"Status Bar: {self._check_status_bar()}"

    @tool(READ)
    def check_network_status(self) -> str:
        """Show the phone's connection state: airplane mode, SIM, cellular connection, signal and type, mobile data, data roaming and Wi-Fi."""
        d = self.device
        lines = [
            f"Airplane Mode: {_on_off(d.airplane_mode)}",
            f"SIM Card Status: {self._check_sim_status().value}",
            f"Cellular Connection: {d.network_connection_status.value}",
            f"Cellular Signal: {d.network_signal_strength.value}",
            f"Cellular Network Type: {d.network_technology_connected.value}",
            f"Mobile Data Enabled: {_yes_no(d.data_enabled)}",
            f"Data Roaming Enabled: {_yes_no(d.roaming_enabled)}",
            f"Wi-Fi Radio: {_on_off(d.wifi_enabled)}",
            f"Wi-Fi Connected: {_yes_no(d.wifi_connected)}",
        ]
        if d.wifi_connected:
            lines.append(f"Connected Wi-Fi Network: {d.wifi_ssid}")
        return "\n".join(lines)

    @tool(READ)
    def check_network_mode_preference(self) -> str:
        """Show which kind of cellular network the phone prefers."""
        return f"Network Mode Preference: {self.device.network_mode_preference.value}"

    @tool(WRITE)
    def set_network_mode_preference(self, mode: NetworkModePreference | str) -> str:
        """Choose which kind of cellular network the phone prefers (faster 4G/5G or older 3G/2G).

        Args:
            mode: One of 4g_5g_preferred, 4g_only, 3g_only, 2g_only.
        """
        try:
            if isinstance(mode, str):
                mode = NetworkModePreference(mode)
            self.device.network_mode_preference = mode
            self.simulate_network_search()
        except ValueError:
            options = ", ".join(m.value for m in NetworkModePreference)
            return self._with_status_bar(
                f"Failed to set network mode: '{mode}' is not a valid option. "
                f"Please use one of: {options}"
            )
        return self._with_status_bar(f"Preferred Network Mode set to: {mode.value}")

    @tool(READ)
    def run_speed_test(self) -> str:
        """Measure the download speed of the phone's mobile data and say what it is good for."""
        mbps, label = self._run_speed_test()
        if mbps is None:
            return f"Speed test failed: {label or 'Could not determine speed'}."
        return f"Speed Test Result: {mbps:.2f} Mbps ({label}). {SPEED_ADVICE.get(label, '')}"

    @tool(WRITE)
    def toggle_airplane_mode(self) -> str:
        """Switch airplane mode on or off; while on, cellular, Wi-Fi and Bluetooth are all off."""
        return self._with_status_bar(
            f"Airplane Mode is now {_on_off(self._toggle_airplane_mode())}."
        )

    @tool(READ)
    def check_sim_status(self) -> str:
        """Show whether the SIM card works, is missing, or is locked by a PIN or PUK."""
        status = self._check_sim_status()
        return SIM_TEXT.get(status, f"Unknown SIM status: {status.value}")

    @tool(WRITE)
    def reseat_sim_card(self) -> str:
        """Take the SIM card out and put it back in, which can fix a SIM that is not recognised."""
        self.device.sim_card_missing = False
        self.simulate_network_search()
        return self._with_status_bar("SIM card re-seated successfully.")

    @tool(WRITE)
    def toggle_data(self) -> str:
        """Switch mobile data on or off (internet over the cellular network when there is no Wi-Fi)."""
        return self._with_status_bar(f"Mobile Data is now {_on_off(self._toggle_data())}.")

    @tool(WRITE)
    def toggle_roaming(self) -> str:
        """Switch data roaming on or off (using mobile data on networks outside the carrier's own)."""
        return self._with_status_bar(f"Data Roaming is now {_on_off(self._toggle_roaming())}.")

    @tool(READ)
    def check_data_restriction_status(self) -> str:
        """Show whether a data-limiting setting (Data Saver) is on."""
        if self.device.data_saver_mode:
            return "Data Saver mode is ON (limits data usage)."
        return "Data Saver mode is OFF."

    @tool(WRITE)
    def toggle_data_saver_mode(self) -> str:
        """Switch Data Saver on or off; it cuts data use and can slow data down."""
        new = self._toggle_data_saver_mode()
        return self._with_status_bar(f"Data Saver Mode is now {_on_off(new)}.")

    @tool(READ)
    def check_apn_settings(self) -> str:
        """Show the APN (the carrier data connection setting): its name and the MMS server URL."""
        apn = self.device.active_apn_settings
        return (
            f"Current APN Name: {apn.apn_name.value or 'Not Set'}\n"
            f"MMSC URL (for picture messages): {apn.mmsc_url or 'Not Set'}\n"
            "(These are technical settings, usually best left unchanged.)"
        )

    @tool(WRITE)
    def set_apn_settings(self, apn_settings: APNSettings | dict) -> str:
        """Replace the phone's APN settings.

        Args:
            apn_settings: The new settings (apn_name, mms_apn, mmsc_url, mms_proxy, mms_port, reset_at_reboot).
        """
        if isinstance(apn_settings, dict):
            apn_settings = APNSettings(**apn_settings)
        self.device.active_apn_settings = apn_settings
        text = f"APN settings set to: {apn_settings.apn_name.value}"
        self.simulate_network_search()
        return self._with_status_bar(text)

    @tool(WRITE)
    def reset_apn_settings(self) -> str:
        """Restore the default APN settings; they take effect at the next reboot."""
        self.device.active_apn_settings.reset_at_reboot = True
        self.simulate_network_search()
        return self._with_status_bar("APN settings will reset at reboot.")

    @tool(READ)
    def check_wifi_status(self) -> str:
        """Show whether Wi-Fi is on, which network it is connected to and how strong it is."""
        d = self.device
        if not d.wifi_enabled:
            return "Wi-Fi is turned OFF."
        if d.wifi_connected:
            return (
                f"Wi-Fi is ON and connected to '{d.wifi_ssid}'. "
                f"Signal strength: {d.wifi_signal_strength.value}."
            )
        return "Wi-Fi is ON but not connected to any network."

    @tool(WRITE)
    def toggle_wifi(self) -> str:
        """Switch the Wi-Fi radio on or off."""
        d = self.device
        if d.airplane_mode:
            return self._with_status_bar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        d.wifi_enabled = not d.wifi_enabled
        if not d.wifi_enabled:
            self._forget_wifi_network()
        return self._with_status_bar(f"Wi-Fi is now {_on_off(d.wifi_enabled)}.")

    @tool(READ)
    def check_wifi_calling_status(self) -> str:
        """Show whether Wi-Fi Calling (calls over Wi-Fi instead of the cellular network) is on."""
        return f"Wi-Fi Calling is currently turned {_on_off(self.device.wifi_calling_enabled)}."

    @tool(WRITE)
    def toggle_wifi_calling(self) -> str:
        """Switch Wi-Fi Calling on or off; it can help where the cellular signal is weak."""
        return self._with_status_bar(
            f"Wi-Fi Calling is now {_on_off(self._toggle_wifi_calling())}."
        )

    @tool(READ)
    def check_vpn_status(self) -> str:
        """Show whether a VPN is set up and connected, with the connection's details."""
        d = self.device
        if d.vpn_connected:
            if d.vpn_details:
                return f"VPN is ON and connected. Details: {d.vpn_details.model_dump()}"
            return "VPN is ON and connected (no specific details available)."
        if d.vpn_enabled_setting:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool(WRITE)
    def connect_vpn(self) -> str:
        """Connect the phone's VPN."""
        if self._connect_vpn() is None:
            return "VPN already connected."
        return self._with_status_bar("VPN connected successfully.")

    @tool(WRITE)
    def disconnect_vpn(self) -> str:
        """Disconnect the VPN, so traffic no longer goes through a VPN server."""
        if self._disconnect_vpn():
            return self._with_status_bar("VPN disconnected successfully.")
        return self._with_status_bar("No active VPN connection to disconnect.")

    @tool(READ)
    def check_installed_apps(self) -> str:
        """List the apps installed on the phone."""
        names = ", ".join(self.device.app_statuses.keys())
        return f"The following apps are installed on the phone: {names}"

    @tool(READ)
    def check_app_status(self, app_name: str) -> str:
        """Show an app's details, including the permissions it holds."""
        app = self.device.app_statuses.get(app_name)
        if not app:
            return f"App '{app_name}' not found on this phone."
        granted = self._granted(app.permissions)
        lines = [f"Status for App: {app_name}"]
        if granted:
            lines.append(" - Permissions Granted:")
            lines.extend(f"   - {name}" for name in granted)
        else:
            lines.append(" - Permissions: None granted.")
        return "\n".join(lines)

    @tool(READ)
    def check_app_permissions(self, app_name: str) -> str:
        """Show which permissions (such as storage or SMS) an app holds."""
        app = self.device.app_statuses.get(app_name)
        if not app:
            return f"App '{app_name}' not found on this phone."
        granted = self._granted(app.permissions)
        if not granted:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(granted)}."

    @staticmethod
    def _granted(permissions) -> list[str]:
        return [
            name.replace("_", " ").lower()
            for name, allowed in permissions.model_dump().items()
            if allowed
        ]

    @tool(WRITE)
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Give an app a permission it needs (such as storage or sms).

        Args:
            app_name: The app to give the permission to.
            permission: The permission, in lowercase.
        """
        app = self.device.app_statuses.get(app_name)
        permission = permission.lower()
        if not app:
            outcome = f"Error. App '{app_name}' not found. Cannot grant permission."
        else:
            known = list(app.permissions.model_dump().keys())
            if permission in known:
                setattr(app.permissions, permission, True)
                outcome = f"Success. Permission '{permission}' granted to app '{app_name}'."
            else:
                outcome = (
                    f"Error. Permission '{permission}' not tracked for app '{app_name}', "
                    f"available permissions: {known}"
                )
        return self._with_status_bar(outcome)

    @tool(READ)
    def can_send_mms(self) -> str:
        """Check whether the messaging app can send picture messages (MMS)."""
        if self._can_send_mms():
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    @tool(WRITE)
    def reboot_device(self) -> str:
        """Restart the phone, which clears many temporary glitches and reconnects every service."""
        lines = []
        if self.device.active_apn_settings.reset_at_reboot:
            lines.append("Resetting APN settings...")
            self.device.active_apn_settings = APNSettings()
        lines.append("Restarting network services...")
        self.device.network_connection_status = NetworkStatus.SEARCHING
        self.simulate_network_search()
        return self._with_status_bar("\n".join(lines))

    @tool(READ)
    def check_payment_request(self) -> str:
        """Check whether the agent has sent a request to pay a bill."""
        request = self.surroundings.payment_request
        if request is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {request.bill_id} of {request.amount_due} USD."

    @tool(WRITE)
    def make_payment(self) -> str:
        """Pay the bill the agent sent a payment request for."""
        request = self.surroundings.payment_request
        if request is None:
            return "You do not have a payment request."
        request.paid = True
        return f"Payment of {request.amount_due} USD has been made for bill {request.bill_id}."
