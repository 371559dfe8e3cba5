//! Profiles: `/api/profiles[/{name}]` (list, create with a first version, read, set the
//! description and assignment, delete), `/api/profiles/{name}/versions[/{version}]` (history, save
//! the next version) and `/api/profiles/{name}/diff?from=&to=` (a unified diff per file). A save
//! is checked by fail2ban on one online host of the profile first; its refusal answers 422 with
//! fail2ban's own messages and stores nothing.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use crate::auth::{Admin, Viewer};
use crate::domain::Labels;
use crate::domain::profiles::{
    FileChangeKind, Profile, ProfileName, ProfileVersion, VersionFileDiff, check_text, parse_files,
};
use crate::fleet::{AgentErrorKind, FleetError};
use crate::profiles::{Assignment, NewVersion, ProfileError, Validation};
use crate::store::profiles::NewProfile;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_profiles, create_profile))
        .routes(routes!(get_profile, update_profile, delete_profile))
        .routes(routes!(list_versions, save_version))
        .routes(routes!(get_version))
        .routes(routes!(diff_versions))
}

impl From<ProfileError> for ApiError {
    fn from(e: ProfileError) -> Self {
        match e {
            ProfileError::Invalid(e) => Self::invalid(&e.field, e.message),
            ProfileError::NotFound(_) | ProfileError::NoVersion { .. } => {
                Self::NotFound(e.to_string())
            }
            ProfileError::NameTaken(_)
            | ProfileError::Assignment(_)
            | ProfileError::Concurrent(_) => Self::Conflict(e.to_string()),
            ProfileError::Rejected { server, error } => Self::Fleet(rejected(&server, error)),
            ProfileError::Fleet(e) => Self::Fleet(e),
            ProfileError::Store(e) => Self::from(e),
        }
    }
}

/// fail2ban's refusal on `server`, said as such: a 422 with its messages whatever the agent's
/// code (a jail or filter the host lacks is a refusal of the profile too).
fn rejected(server: &str, error: FleetError) -> FleetError {
    match error {
        FleetError::Agent {
            kind,
            message,
            details,
            current_version,
        } => FleetError::Agent {
            kind: match kind {
                AgentErrorKind::PolicyRefused | AgentErrorKind::InvalidArgument => kind,
                _ => AgentErrorKind::ValidationFailed,
            },
            message: format!("checked on {server}: {message}"),
            details,
            current_version,
        },
        other => other,
    }
}

/// A profile name from the path; one that breaks the name rule names no profile.
fn path_name(raw: &str) -> Result<ProfileName, ApiError> {
    ProfileName::parse(raw).map_err(|_| ApiError::NotFound(format!("no profile is named {raw:?}")))
}

/// One file of a version as sent.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileBody {
    /// `jail.d/<jail>.local`, `filter.d/<filter>.local` or `jail.d/banhub-defaults.local`.
    #[schema(
        max_length = 80,
        pattern = "^(jail|filter)\\.d/[A-Za-z0-9][A-Za-z0-9._@-]{0,63}\\.local$"
    )]
    path: String,
    /// The file's text (at most 65536 bytes); empty when `exists` is false.
    #[serde(default)]
    #[schema(max_length = 65536)]
    content: String,
    /// `false`: the file must not exist on the hosts (banhub removes it).
    #[serde(default = "yes")]
    exists: bool,
}

fn yes() -> bool {
    true
}

/// Body of `POST /api/profiles`: the profile and its first version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateProfileBody {
    #[schema(value_type = super::schemas::Name)]
    name: String,
    /// At most 1024 characters.
    #[serde(default)]
    #[schema(max_length = 1024)]
    description: String,
    /// The servers the profile applies to: those carrying every one of these labels (none when
    /// empty). A server has one profile.
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
    /// The first version's files: 1 to 64.
    #[schema(min_items = 1, max_items = 64)]
    files: Vec<FileBody>,
    /// What the version changes; at most 1024 characters.
    #[serde(default)]
    #[schema(max_length = 1024)]
    comment: String,
}

/// Body of `POST /api/profiles/{name}/versions`: the next version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionBody {
    /// 1 to 64 files.
    #[schema(min_items = 1, max_items = 64)]
    files: Vec<FileBody>,
    /// What the version changes; at most 1024 characters.
    #[serde(default)]
    #[schema(max_length = 1024)]
    comment: String,
}

/// Body of `PUT /api/profiles/{name}`: the description and the assignment.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateProfileBody {
    /// At most 1024 characters.
    #[serde(default)]
    #[schema(max_length = 1024)]
    description: String,
    /// The servers the profile applies to (none when empty).
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
    /// The version the servers should have; absent: always the latest.
    #[schema(minimum = 1)]
    pinned_version: Option<i64>,
}

/// A profile and its assignment.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileDto {
    name: String,
    description: String,
    /// The label selector of the servers it applies to; empty: none.
    labels: BTreeMap<String, String>,
    /// The version pinned for the servers; absent: the latest.
    pinned_version: Option<i64>,
    latest_version: Option<i64>,
    /// The version the servers should have.
    desired_version: Option<i64>,
    created_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<Profile> for ProfileDto {
    fn from(p: Profile) -> Self {
        Self {
            name: p.name.to_string(),
            description: p.description.clone(),
            desired_version: p.desired_version(),
            labels: p.selector,
            pinned_version: p.pinned_version,
            latest_version: p.latest_version,
            created_by: p.created_by,
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }
}

/// One file of a saved version.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionFileDto {
    path: String,
    content: String,
    exists: bool,
}

/// A saved version of a profile; versions never change.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionDto {
    profile: String,
    version: i64,
    comment: String,
    author: String,
    created_at: DateTime<Utc>,
    files: Vec<VersionFileDto>,
}

impl From<ProfileVersion> for VersionDto {
    fn from(v: ProfileVersion) -> Self {
        Self {
            profile: v.profile.to_string(),
            version: v.version,
            comment: v.comment,
            author: v.author,
            created_at: v.created_at,
            files: v
                .files
                .into_iter()
                .map(|f| VersionFileDto {
                    path: f.path.to_string(),
                    exists: f.content.is_some(),
                    content: f.content.unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// Where fail2ban checked the files of a save.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationDto {
    /// The server whose fail2ban checked the files (`fail2ban-client -t` and the filters'
    /// expressions on a shadow copy, nothing written); absent when no server could.
    checked_on: Option<String>,
    /// fail2ban's warnings, or why no server checked the files.
    notes: Vec<String>,
}

impl From<Validation> for ValidationDto {
    fn from(v: Validation) -> Self {
        Self {
            checked_on: v.checked_on,
            notes: v.notes,
        }
    }
}

/// A created profile with its first version.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedProfile {
    profile: ProfileDto,
    version: VersionDto,
    validation: ValidationDto,
}

/// A saved version.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavedVersion {
    version: VersionDto,
    validation: ValidationDto,
}

/// How one file differs between two versions.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum ChangeDto {
    Added,
    Removed,
    Changed,
}

/// One file that differs, with its unified diff.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiffDto {
    path: String,
    change: ChangeDto,
    /// `diff -u` of the file from the first version to the second.
    diff: String,
}

impl From<VersionFileDiff> for FileDiffDto {
    fn from(d: VersionFileDiff) -> Self {
        Self {
            path: d.path,
            change: match d.change {
                FileChangeKind::Added => ChangeDto::Added,
                FileChangeKind::Removed => ChangeDto::Removed,
                FileChangeKind::Changed => ChangeDto::Changed,
            },
            diff: d.diff,
        }
    }
}

/// The difference between two versions of a profile.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiffDto {
    profile: String,
    from: i64,
    to: i64,
    /// The files that differ, by path; empty when the versions hold the same files.
    files: Vec<FileDiffDto>,
}

fn new_version(files: Vec<FileBody>, comment: String) -> Result<NewVersion, ApiError> {
    check_text("comment", &comment)?;
    let mut raw = Vec::with_capacity(files.len());
    for (index, file) in files.into_iter().enumerate() {
        if !file.exists && !file.content.is_empty() {
            return Err(ApiError::invalid(
                &format!("files[{index}].content"),
                "must be empty for a file that must not exist",
            ));
        }
        raw.push((file.path, file.exists.then_some(file.content)));
    }
    Ok(NewVersion {
        files: parse_files(raw)?,
        comment,
    })
}

fn selector(labels: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ApiError> {
    Ok(Labels::parse(labels)
        .map_err(|e| ApiError::invalid("labels", e))?
        .into_map())
}

impl From<crate::domain::profiles::ProfileRuleError> for ApiError {
    fn from(e: crate::domain::profiles::ProfileRuleError) -> Self {
        Self::invalid(&e.field, e.message)
    }
}

/// Every profile with its assignment.
#[utoipa::path(get, path = "/api/profiles", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<ProfileDto>)))]
async fn list_profiles(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<Vec<ProfileDto>>, ApiError> {
    let profiles = state.profiles.list().await?;
    Ok(ApiJson(profiles.into_iter().map(Into::into).collect()))
}

/// Creates a profile with its first version. The files are checked by fail2ban on one online
/// server carrying the labels first (nothing is written there); the answer says which, or that
/// none could.
#[utoipa::path(post, path = "/api/profiles", tag = "profiles", request_body = CreateProfileBody,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = CreatedProfile),
              (status = 409, description = "The name is taken, or a server would have two profiles", body = Problem),
              (status = 422, description = "A field breaks its rule (`invalid_field`), or fail2ban on a server of the profile refused the files with its own messages in `details` (`config_invalid`, `host_policy`, `agent_refused_argument`)", body = Problem)))]
async fn create_profile(
    caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateProfileBody>,
) -> Result<(StatusCode, ApiJson<CreatedProfile>), ApiError> {
    let name = ProfileName::parse(&body.name).map_err(|e| ApiError::invalid("name", e))?;
    check_text("description", &body.description)?;
    let new = NewProfile {
        name,
        description: body.description,
        selector: selector(body.labels)?,
        created_by: caller.requested_by(),
    };
    let version = new_version(body.files, body.comment)?;
    let (profile, version, validation) = state.profiles.create(new, version).await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(CreatedProfile {
            profile: profile.into(),
            version: version.into(),
            validation: validation.into(),
        }),
    ))
}

/// One profile.
#[utoipa::path(get, path = "/api/profiles/{name}", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 200, body = ProfileDto), (status = 404, body = Problem)))]
async fn get_profile(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<ProfileDto>, ApiError> {
    let profile = state.profiles.get(&path_name(&name)?).await?;
    Ok(ApiJson(profile.into()))
}

/// Sets a profile's description and assignment: the labels of its servers and, optionally, the
/// version they should have.
#[utoipa::path(put, path = "/api/profiles/{name}", tag = "profiles", request_body = UpdateProfileBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 200, body = ProfileDto), (status = 404, body = Problem),
              (status = 409, description = "A server would have two profiles", body = Problem),
              (status = 422, body = Problem)))]
async fn update_profile(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<UpdateProfileBody>,
) -> Result<ApiJson<ProfileDto>, ApiError> {
    let name = path_name(&name)?;
    check_text("description", &body.description)?;
    let assignment = Assignment {
        description: body.description,
        selector: selector(body.labels)?,
        pinned_version: body.pinned_version,
    };
    let profile = state
        .profiles
        .assign(&name, assignment)
        .await
        .map_err(|e| match e {
            ProfileError::NoVersion { .. } => ApiError::invalid("pinnedVersion", e),
            e => e.into(),
        })?;
    Ok(ApiJson(profile.into()))
}

/// Deletes a profile and its versions; its servers keep their files and have no profile.
#[utoipa::path(delete, path = "/api/profiles/{name}", tag = "profiles",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 204), (status = 404, body = Problem)))]
async fn delete_profile(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.profiles.delete(&path_name(&name)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A profile's history: every version, oldest first.
#[utoipa::path(get, path = "/api/profiles/{name}/versions", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 200, body = Vec<VersionDto>), (status = 404, body = Problem)))]
async fn list_versions(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<Vec<VersionDto>>, ApiError> {
    let versions = state.profiles.versions(&path_name(&name)?).await?;
    Ok(ApiJson(versions.into_iter().map(Into::into).collect()))
}

/// Saves the next version of a profile (versions never change). The files are checked by
/// fail2ban on one online server of the profile first (nothing is written there).
#[utoipa::path(post, path = "/api/profiles/{name}/versions", tag = "profiles", request_body = VersionBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Profile name")),
    responses((status = 201, body = SavedVersion), (status = 404, body = Problem),
              (status = 409, description = "Another save came first", body = Problem),
              (status = 422, description = "A field breaks its rule (`invalid_field`), or fail2ban on a server of the profile refused the files with its own messages in `details` (`config_invalid`, `host_policy`, `agent_refused_argument`)", body = Problem)))]
async fn save_version(
    caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<VersionBody>,
) -> Result<(StatusCode, ApiJson<SavedVersion>), ApiError> {
    let name = path_name(&name)?;
    let version = new_version(body.files, body.comment)?;
    let (version, validation) = state
        .profiles
        .save_version(&name, version, &caller.requested_by())
        .await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(SavedVersion {
            version: version.into(),
            validation: validation.into(),
        }),
    ))
}

/// One version of a profile with its files.
#[utoipa::path(get, path = "/api/profiles/{name}/versions/{version}", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    params(("name" = String, Path, description = "Profile name"),
           ("version" = i64, Path, description = "Version number", minimum = 1)),
    responses((status = 200, body = VersionDto), (status = 404, body = Problem)))]
async fn get_version(
    _caller: Viewer,
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Result<ApiJson<VersionDto>, ApiError> {
    let name = path_name(&name)?;
    let number = version
        .parse::<i64>()
        .map_err(|_| ApiError::NotFound(format!("profile {name} has no version {version:?}")))?;
    Ok(ApiJson(state.profiles.version(&name, number).await?.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DiffParams {
    /// The older version.
    #[param(minimum = 1)]
    from: i64,
    /// The newer version.
    #[param(minimum = 1)]
    to: i64,
}

/// The files that differ between two versions of a profile, each with its unified diff.
#[utoipa::path(get, path = "/api/profiles/{name}/diff", tag = "profiles", params(("name" = String, Path, description = "Profile name"), DiffParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = DiffDto), (status = 404, body = Problem),
              (status = 422, body = Problem)))]
async fn diff_versions(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    params: Result<Query<DiffParams>, QueryRejection>,
) -> Result<ApiJson<DiffDto>, ApiError> {
    let name = path_name(&name)?;
    let params = super::error::query(params)?;
    for (field, value) in [("from", params.from), ("to", params.to)] {
        if value < 1 {
            return Err(ApiError::invalid(
                field,
                "must be a version number, 1 or more",
            ));
        }
    }
    let files = state.profiles.diff(&name, params.from, params.to).await?;
    Ok(ApiJson(DiffDto {
        profile: name.to_string(),
        from: params.from,
        to: params.to,
        files: files.into_iter().map(Into::into).collect(),
    }))
}
