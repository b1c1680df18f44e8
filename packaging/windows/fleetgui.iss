; Inno Setup 6.3+ script: the fleetgui installer for 64-bit Windows.
;
; Build the two PyInstaller bundles first (packaging\README.md), then from the checkout root:
;
;   "%ProgramFiles(x86)%\Inno Setup 6\ISCC.exe" packaging\windows\fleetgui.iss
;
; which writes dist\installer\fleetgui-setup-<version>.exe. The version is not written here:
; it is read from dist\fleetgui\fleetgui.exe, whose version resource PyInstaller made from
; fleetgui.__version__ (packaging\bundle_config.py). Override with /DAppVersion=1.2.3, and the
; bundle folder with /DDistDir=C:\path\to\dist.
;
; Or `python packaging/build.py installer` (pinned Inno Setup, under Wine off Windows), which
; with --check also installs and uninstalls the result under Wine and checks what it leaves.
;
; Installs (components):
;   app    -> {app}\          the desktop app (fleetgui.exe, windowed) and the command line
;                              (fleetgui-cli.exe), Start-menu and desktop shortcuts
;   worker -> {app}\worker\   the worker agent (fleetgui-worker.exe with a console,
;                              fleetgui-worker-background.exe without), optionally started at
;                              login, with a Windows Firewall rule for its two TCP ports
; The uninstaller keeps the user's data (keys, settings, chat history, shard cache under
; %LOCALAPPDATA%\fleetgui) unless the user answers Yes to removing it.

#define AppName "fleetgui"
#define AppPublisher "fleetgui developers"
#define WorkerPorts "5555-5556"
#define FirewallRule "fleetgui worker"
#define DiscoveryRule "fleetgui worker discovery (mDNS)"
#define RunValue "fleetgui worker"

#ifndef DistDir
  #define DistDir AddBackslash(SourcePath) + "..\..\dist"
#endif
; The bundles' executables end in .exe: this installer is for the Windows bundles. To prove this
; script on Linux, packaging/build.py packs the Linux bundles (/DBundleExeSuffix= and the
; version given): shortcuts, the Run value and the firewall rules still name the .exe files.
#ifndef BundleExeSuffix
  #define BundleExeSuffix ".exe"
#endif
#define AppExe DistDir + "\fleetgui\fleetgui" + BundleExeSuffix
#define WorkerExe DistDir + "\fleetgui-worker\fleetgui-worker" + BundleExeSuffix

#if !FileExists(AppExe)
  #error AppExe + " is missing: build packaging\fleetgui-app.spec first"
#endif
#if !FileExists(WorkerExe)
  #error WorkerExe + " is missing: build packaging\fleetgui-worker.spec first"
#endif

#ifndef AppVersion
  ; ProductVersion is fleetgui.__version__ as written (e.g. 0.1.0).
  #define AppVersion GetStringFileInfo(AppExe, "ProductVersion")
#endif
#if AppVersion == ""
  #error "no ProductVersion in fleetgui.exe: was it built with packaging\fleetgui-app.spec?"
#endif
#ifndef AppVersionNumbers
  ; The numeric form (0.1.0.0) for the setup's own version resource.
  #define AppVersionNumbers GetVersionNumbersString(AppExe)
#endif

[Setup]
; Never change AppId: it is how a new version finds and replaces the installed one.
AppId={{6E1F0A52-3C4B-4F7D-9B8E-2A1D5C7F9E03}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher={#AppPublisher}
VersionInfoVersion={#AppVersionNumbers}
VersionInfoProductVersion={#AppVersionNumbers}
VersionInfoProductTextVersion={#AppVersion}
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
; Administrator install (Program Files, firewall rule, start for every user) by default; the
; dialog also offers a per-user install without administrator rights (no firewall rule then:
; Windows asks the first time the worker listens).
PrivilegesRequired=admin
PrivilegesRequiredOverridesAllowed=dialog commandline
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir={#DistDir}\installer
OutputBaseFilename=fleetgui-setup-{#AppVersion}
SetupIconFile=..\..\resources\icons\fleetgui.ico
UninstallDisplayIcon={app}\fleetgui.ico
UninstallDisplayName={#AppName} {#AppVersion}
WizardStyle=modern
Compression=lzma2/max
SolidCompression=yes
; A running app or worker holds its files open: close it (the worker has no window to ask).
CloseApplications=force
RestartApplications=no

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Types]
Name: "full"; Description: "Desktop app and worker agent (the coordinator PC)"
Name: "workeronly"; Description: "Worker agent only (a PC that lends its compute)"
Name: "custom"; Description: "Custom"; Flags: iscustom

[Components]
Name: "app"; Description: "Desktop app and command line (with the model exporter)"; Types: full
Name: "worker"; Description: "Worker agent (OpenVINO runtime only)"; Types: full workeronly

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Components: app
Name: "workerlogin"; Description: "Start the worker agent when a user logs in (in the background)"; GroupDescription: "Worker agent:"; Components: worker
Name: "firewall"; Description: "Allow coordinators to reach the worker through Windows Firewall (TCP {#WorkerPorts}, private and domain networks)"; GroupDescription: "Worker agent:"; Components: worker; Check: IsAdminInstallMode

[InstallDelete]
; A bundle is replaced whole: files of an older build must not linger beside the new ones.
Type: filesandordirs; Name: "{app}\_internal"; Components: app
Type: filesandordirs; Name: "{app}\worker\_internal"; Components: worker

[Files]
Source: "{#DistDir}\fleetgui\*"; DestDir: "{app}"; Components: app; Flags: ignoreversion recursesubdirs createallsubdirs
Source: "{#DistDir}\fleetgui-worker\*"; DestDir: "{app}\worker"; Components: worker; Flags: ignoreversion recursesubdirs createallsubdirs
Source: "..\..\resources\icons\fleetgui.ico"; DestDir: "{app}"; Flags: ignoreversion

[Icons]
Name: "{group}\{#AppName}"; Filename: "{app}\fleetgui.exe"; WorkingDir: "{app}"; Components: app
Name: "{group}\{#AppName} command line"; Filename: "{cmd}"; Parameters: "/K fleetgui-cli.exe --help"; WorkingDir: "{app}"; Components: app
Name: "{group}\{#AppName} worker (console)"; Filename: "{app}\worker\fleetgui-worker.exe"; WorkingDir: "{app}\worker"; Components: worker
Name: "{group}\{cm:UninstallProgram,{#AppName}}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\fleetgui.exe"; WorkingDir: "{app}"; Tasks: desktopicon

[Registry]
; Start at login: HKA is HKLM (every user) in an administrator install, HKCU in a per-user one.
Root: HKA; Subkey: "Software\Microsoft\Windows\CurrentVersion\Run"; ValueType: string; ValueName: "{#RunValue}"; ValueData: """{app}\worker\fleetgui-worker-background.exe"""; Flags: uninsdeletevalue; Tasks: workerlogin

[Run]
; Firewall: delete first, so that reinstalling does not stack duplicate rules.
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall delete rule name=""{#FirewallRule}"""; Flags: runhidden; Tasks: firewall; StatusMsg: "Adding the firewall rule..."
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall add rule name=""{#FirewallRule}"" dir=in action=allow protocol=TCP localport={#WorkerPorts} profile=private,domain"; Flags: runhidden; Tasks: firewall
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall delete rule name=""{#DiscoveryRule}"""; Flags: runhidden; Tasks: firewall
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall add rule name=""{#DiscoveryRule}"" dir=in action=allow protocol=UDP localport=5353 program=""{app}\worker\fleetgui-worker-background.exe"" profile=private,domain"; Flags: runhidden; Tasks: firewall
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall add rule name=""{#DiscoveryRule}"" dir=in action=allow protocol=UDP localport=5353 program=""{app}\worker\fleetgui-worker.exe"" profile=private,domain"; Flags: runhidden; Tasks: firewall
Filename: "{app}\worker\fleetgui-worker-background.exe"; Description: "Start the worker agent now"; Flags: nowait postinstall skipifsilent runasoriginaluser; Tasks: workerlogin
Filename: "{app}\fleetgui.exe"; Description: "{cm:LaunchProgram,{#AppName}}"; Flags: nowait postinstall skipifsilent runasoriginaluser unchecked; Components: app

[UninstallRun]
Filename: "{sys}\taskkill.exe"; Parameters: "/F /IM fleetgui-worker-background.exe"; Flags: runhidden; RunOnceId: "StopWorkerBackground"; Components: worker
Filename: "{sys}\taskkill.exe"; Parameters: "/F /IM fleetgui-worker.exe"; Flags: runhidden; RunOnceId: "StopWorkerConsole"; Components: worker
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall delete rule name=""{#FirewallRule}"""; Flags: runhidden; RunOnceId: "DeleteFirewallRule"; Tasks: firewall
Filename: "{sys}\netsh.exe"; Parameters: "advfirewall firewall delete rule name=""{#DiscoveryRule}"""; Flags: runhidden; RunOnceId: "DeleteDiscoveryRule"; Tasks: firewall

[Code]
var
  RemoveUserData: Boolean;

{ A worker started at login keeps its files open: stop it before files are replaced. }
function PrepareToInstall(var NeedsRestart: Boolean): String;
var
  ResultCode: Integer;
begin
  Exec(ExpandConstant('{sys}\taskkill.exe'), '/F /IM fleetgui-worker-background.exe', '',
    SW_HIDE, ewWaitUntilTerminated, ResultCode);
  Result := '';
end;

{ User data (keys, settings, chat history, shard cache) survives an uninstall unless the user
  asks for it to go; a silent uninstall always keeps it. fleetgui keeps it in
  %LOCALAPPDATA%\fleetgui (platformdirs); %APPDATA%\fleetgui is cleared too in case a future
  version roams settings. }
procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if CurUninstallStep = usUninstall then
  begin
    RemoveUserData := False;
    if not UninstallSilent then
      { No line may start with #13#10: the preprocessor takes a leading # for its own. }
      RemoveUserData := MsgBox(
        'Also remove your fleetgui data?' + #13#10#13#10 +
        'This deletes this PC''s fleetgui keys, paired coordinators and workers, settings, ' +
        'chat history and shard cache (' + ExpandConstant('{localappdata}\fleetgui') +
        ').' + #13#10#13#10 + 'Choose No to keep them for a later installation.',
        mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
  end;
  if (CurUninstallStep = usPostUninstall) and RemoveUserData then
  begin
    DelTree(ExpandConstant('{localappdata}\fleetgui'), True, True, True);
    DelTree(ExpandConstant('{userappdata}\fleetgui'), True, True, True);
  end;
end;
