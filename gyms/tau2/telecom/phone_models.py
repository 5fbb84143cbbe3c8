"""The customer's side of tau2's telecom domain: the phone's settings and the world around it.

`TelecomUserDB` holds the phone (`device`: SIM, radios, APN, Wi-Fi, VPN, apps) and the
surroundings the carrier controls (`surroundings`: abroad or not, roaming allowed, line
active, data cap exceeded, a pending payment request). Field names, defaults and types
follow tau2-bench v1.0.1 exactly so the user database hashes as tau2's does (the signal map
is keyed by `NetworkTechnology` members, defaults are not re-validated unless tau2 says so).
The phone's behaviour is in `phone_network.py` and `phone_tools.py`.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import Field

from gyms.tau2.telecom.carrier_models import read_toml
from gyms.tau2.toolkit import DBModel


class SimStatus(str, Enum):
    ACTIVE = "active"
    MISSING = "missing"
    LOCKED_PIN = "locked_pin"
    LOCKED_PUK = "locked_puk"


class NetworkTechnology(str, Enum):
    NONE = "none"
    TWO_G = "2G"
    THREE_G = "3G"
    FOUR_G = "4G"
    FIVE_G = "5G"


class NetworkModePreference(str, Enum):
    FOUR_G_5G_PREFERRED = "4g_5g_preferred"
    FOUR_G_ONLY = "4g_only"
    THREE_G_ONLY = "3g_only"
    TWO_G_ONLY = "2g_only"


class SignalStrength(str, Enum):
    NONE = "none"
    POOR = "poor"
    FAIR = "fair"
    GOOD = "good"
    EXCELLENT = "excellent"


class PerformanceLevel(str, Enum):
    UNKNOWN = "unknown"
    POOR = "poor"
    FAIR = "fair"
    GOOD = "good"
    EXCELLENT = "excellent"


class NetworkStatus(str, Enum):
    CONNECTED = "connected"
    SEARCHING = "searching"
    NO_SERVICE = "no_service"
    EMERGENCY_ONLY = "emergency_only"


class APNNames(str, Enum):
    INTERNET = "internet"
    BROKEN = "broken"


class APNSettings(DBModel):
    apn_name: APNNames = APNNames.INTERNET
    reset_at_reboot: bool = False
    mms_apn: str | None = "mms"
    mmsc_url: str | None = "http://mms.carrier.com/mms/wapenc"
    mms_proxy: str | None = None
    mms_port: int | None = None


class VpnDetails(DBModel):
    server_address: str | None = None
    protocol: str | None = None
    server_performance: PerformanceLevel = Field(
        default=PerformanceLevel.UNKNOWN, validate_default=True
    )


class AppPermissions(DBModel):
    sms: bool = False
    storage: bool = False
    phone: bool = False
    network: bool = False


class AppStatus(DBModel):
    app_name: str
    permissions: AppPermissions = Field(default_factory=AppPermissions)


def _default_apps() -> dict[str, AppStatus]:
    return {
        "messaging": AppStatus(
            app_name="messaging",
            permissions=AppPermissions(sms=True, storage=True, phone=True),
        ),
        "browser": AppStatus(
            app_name="browser", permissions=AppPermissions(network=True, storage=True)
        ),
    }


def _validated(default):
    return Field(default=default, validate_default=True)


class MockPhoneAttributes(DBModel):
    """Everything about the phone that its owner can see or change."""

    sim_card_status: SimStatus = _validated(SimStatus.ACTIVE)
    sim_card_missing: bool = False
    airplane_mode: bool = False
    network_signal_strength: SignalStrength = _validated(SignalStrength.GOOD)
    network_technology_connected: NetworkTechnology = _validated(NetworkTechnology.FIVE_G)
    network_connection_status: NetworkStatus = _validated(NetworkStatus.CONNECTED)
    battery_level: int = 80
    data_enabled: bool = True
    roaming_enabled: bool = False
    network_mode_preference: NetworkModePreference = _validated(
        NetworkModePreference.FOUR_G_5G_PREFERRED
    )
    active_apn_settings: APNSettings = Field(default_factory=APNSettings)
    wifi_enabled: bool = False
    wifi_connected: bool = False
    wifi_ssid: str | None = None
    wifi_signal_strength: SignalStrength = _validated(SignalStrength.NONE)
    wifi_calling_enabled: bool = False
    wifi_calling_mms_over_wifi: bool = False
    data_saver_mode: bool = False
    vpn_enabled_setting: bool = False
    vpn_connected: bool = False
    vpn_details: VpnDetails | None = None
    app_statuses: dict[str, AppStatus] = Field(default_factory=_default_apps)


class PaymentRequest(DBModel):
    """A bill the agent has asked the customer to pay."""

    bill_id: str
    amount_due: float
    paid: bool = False


def _default_signal() -> dict[NetworkTechnology, SignalStrength]:
    return {
        NetworkTechnology.TWO_G: SignalStrength.POOR,
        NetworkTechnology.THREE_G: SignalStrength.FAIR,
        NetworkTechnology.FOUR_G: SignalStrength.GOOD,
        NetworkTechnology.FIVE_G: SignalStrength.EXCELLENT,
    }


class UserSurroundings(DBModel):
    """Where the customer is and what the carrier allows them (kept in step by the environment)."""

    name: str | None = None
    phone_number: str | None = None
    is_abroad: bool = False
    roaming_allowed: bool = False
    signal_strength: dict[NetworkTechnology, SignalStrength] = Field(
        default_factory=_default_signal
    )
    mobile_data_usage_exceeded: bool = False
    line_active: bool = True
    payment_request: PaymentRequest | None = None


class TelecomUserDB(DBModel):
    """The user's side of the domain: the phone and its surroundings."""

    device: MockPhoneAttributes = Field(default_factory=MockPhoneAttributes)
    surroundings: UserSurroundings = Field(default_factory=UserSurroundings)

    @classmethod
    def load(cls, path: Path | str) -> TelecomUserDB:
        return cls.model_validate(read_toml(path))
